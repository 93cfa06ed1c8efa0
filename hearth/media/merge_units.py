"""Qwen-VL's pixels, as transformers' Qwen2VLImageProcessor (PIL backend) makes them: `smart_resize` keeps the
aspect with each side a multiple of patch * merge and the area within min_pixels..max_pixels, and `patchify`
cuts the normalized image into patches, each repeated over the temporal patch size (a still image is two equal
frames to the Conv3d patch embedding), flattened in merge-unit order. Kept 5-d, [rows, cols, m * m, C * T * p * p]:
the same bytes in the same order as the processor's pixel_values, with the grid in the shape for the tower."""

from __future__ import annotations

import math

import numpy as np
from PIL import Image

MAX_ASPECT = 200
"""smart_resize refuses a longer side more than this many times the shorter (HF's ValueError)."""


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int,
                 half_up: bool = False) -> tuple[int, int]:
    """(height, width) as Qwen2VLImageProcessor sizes an image: rounded to multiples of factor, then scaled down
    (floored) or up (ceiled) into [min_pixels, max_pixels] by one ratio. Python's round (to even), as HF's;
    half_up: std::round's halves away from zero, as llama.cpp's calc_size_preserved_ratio (gemma4v's only reference)."""
    if max(height, width) / min(height, width) > MAX_ASPECT:
        raise ValueError(f"image is {width}x{height} pixels: one side is more than {MAX_ASPECT} times the other")
    h, w = round(height / factor) * factor, round(width / factor) * factor
    if half_up:  # and at least one unit a side (HF's may round a thin side to 0, which then scales up)
        h, w = (max(factor, math.floor(s / factor + 0.5) * factor) for s in (height, width))
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h, w = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h, w


def resize(img: Image.Image, cfg):
    """RESIZES' "smart": uint8 [1, H, W, 3] (one piece), no tile grid."""
    factor = cfg.patch_size * cfg.merge
    h, w = smart_resize(img.height, img.width, factor, cfg.min_pixels, cfg.max_pixels, cfg.spec.half_up)
    return np.asarray(img.resize((w, h), resample=Image.Resampling[cfg.spec.resample]))[None], 0, 0


def patchify(pixels: np.ndarray, cfg) -> tuple[np.ndarray, int, tuple[int, int]]:
    """LAYOUTS' "qwen2vl": f32 [1, 3, H, W] -> ([1, rows, cols, m * m, 3 * T * p * p], rows * cols, (rows, cols)),
    rows and cols those of the merged grid (H / (p * m), W / (p * m)), row-major: the LM's M-RoPE grid."""
    p, m, t = cfg.patch_size, cfg.merge, cfg.spec.frames
    (c, height, width), rows, cols = pixels.shape[1:], pixels.shape[2] // (p * m), pixels.shape[3] // (p * m)
    x = pixels[0].reshape(c, rows, m, p, cols, m, p)
    x = x.transpose(1, 4, 2, 5, 0, 3, 6)  # [rows, cols, mh, mw, C, ph, pw]: HF's patchify order
    x = np.broadcast_to(x[:, :, :, :, :, None], (*x.shape[:5], t, p, p))  # the frames: C, T, ph, pw
    return np.ascontiguousarray(x.reshape(1, rows, cols, m * m, c * t * p * p)), rows * cols, (rows, cols)
