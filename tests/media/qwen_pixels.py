"""What the Qwen image tests share: a random PNG, and hearth's prepared image checked against the image
processor's output for it (grid, pixel_values bit for bit)."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image


def png(w: int, h: int, seed: int = 0) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def hf_pixels(processor, data: bytes) -> dict:
    """The processor's numpy output (pixel_values, image_grid_thw) for the encoded image `data`."""
    return processor(images=Image.open(io.BytesIO(data)), return_tensors="np")


def assert_same_as_hf(got, hf: dict, grid: tuple[int, int], patch: int) -> None:
    """got (hearth's PreparedImage) has the processor's grid (merged 2 x 2) and its pixel_values ([rows, patch])."""
    (t, gh, gw), = hf["image_grid_thw"]
    assert (t, gh // 2, gw // 2) == (1, *grid) and got.grid == grid and got.num_embeds == grid[0] * grid[1]
    assert got.pixels.dtype == np.float32 and got.pixels.shape == (1, *grid, 4, patch)
    np.testing.assert_array_equal(got.pixels.reshape(-1, patch), hf["pixel_values"])
