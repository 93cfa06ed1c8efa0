"""Qwen3-VL images against its image processor (Qwen2VLImageProcessor, PIL backend, as Qwen3-VL's
preprocessor_config sets it: 16 px patches, merge 2, mean / std 0.5): smart_resize by factor 32 at odd, tiny
(min_pixels), large and thin sizes, and the file's own image_max_pixels; the pixels bit for bit (pixel_values in
merge-unit order, each patch's two equal frames), the grid the LM's M-RoPE reads, and the image's prompt text
(<|vision_start|>, one <|image_pad|> per row, <|vision_end|>: Qwen3VLProcessor's expansion)."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.media.config import read_vision_config
from hearth.media.images import prepare_image
from tests.media.qwen_pixels import assert_same_as_hf, hf_pixels, png
from tests.mmproj_factory import tiny_hf
from tests.mmproj_qwen3 import MAX_PIXELS, MIN_PIXELS, NAME, PATCH, UNIT, hf_processor, write_mmproj

SMALL_MAX = 40 * UNIT
"""A file naming its own image_max_pixels (clip.vision.image_max_pixels): reached by a 400 px image, cheaply."""


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    """max_pixels written (or None) -> the VisionConfig."""
    model, out = tiny_hf(NAME), {}
    for limit in (None, SMALL_MAX):
        path = tmp_path_factory.mktemp("qwen3") / f"{limit}.gguf"
        write_mmproj(path, model, max_pixels=limit)
        out[limit] = read_vision_config(path)
    return out


SIZES = {  # (w, h) -> (rows, cols) of merged rows with llama.cpp's limits (8 to 4096 rows)
    "wide-odd": ((71, 45), (3, 4)),  # 45 x 71 -> 32 x 64 is 2 rows: up to 8 by min_pixels
    "tall": ((30, 97), (6, 2)),
    "tiny": ((5, 3), (3, 4)),  # rounds to 0 x 0: min_pixels alone decides
    "one-pixel": ((1, 1), (3, 3)),
    "square": ((96, 96), (3, 3)),
    "odd-large": ((196, 308), (10, 6)),
    "wide-large": ((700, 500), (16, 22)),
    "thin": ((400, 9), (1, 19)),  # ratio 44: allowed; 9 rounds to 0, so min_pixels scales both up
}


@pytest.mark.parametrize("case", SIZES)
def test_pixels_grid_and_text_equal_the_hf_processor(configs, case):
    (w, h), grid = SIZES[case]
    data = png(w, h, seed=w * h)
    got = prepare_image(data, configs[None])
    assert_same_as_hf(got, hf_pixels(hf_processor(), data), grid, PATCH)
    assert (got.befores, got.placeholder, got.after) == (("<|vision_start|>",), "<|image_pad|>", "<|vision_end|>")
    assert not got.bidirectional and len(got.digests) == 1


@pytest.mark.parametrize("size", [(400, 300), (120, 800), (400, 399)])
def test_max_pixels_from_the_file(configs, size):
    """A file's clip.vision.image_max_pixels bounds the area (floored to multiples of 32), as the processor's."""
    cfg = configs[SMALL_MAX]
    data = png(*size)
    got = prepare_image(data, cfg)
    hf = hf_pixels(hf_processor(max_pixels=SMALL_MAX), data)
    np.testing.assert_array_equal(got.pixels.reshape(-1, PATCH), hf["pixel_values"])
    assert got.num_embeds <= 40 and got.num_embeds * 4 == len(hf["pixel_values"])
    assert (cfg.min_pixels, cfg.max_pixels, cfg.num_embeds) == (MIN_PIXELS, SMALL_MAX, 40)


def test_default_bounds_are_llama_cpps(configs):
    """No image_min/max_pixels in the file (the converter writes none): 8 to 4096 rows of 32 x 32 pixels."""
    cfg = configs[None]
    assert (cfg.min_pixels, cfg.max_pixels, cfg.num_embeds, cfg.patch_size, cfg.merge) == \
        (MIN_PIXELS, MAX_PIXELS, 4096, 16, 2)
