"""IQ4_NL / IQ4_XS encoders for test files (gguf-py dequantizes these types but cannot quantize them).

Simplified from llama.cpp's quantize_row_iq4_nl / quantize_row_iq4_xs (no importance weights, no scale
search): a 32-weight block's scale puts its largest-magnitude weight on the codebook's -127, each weight
takes the nearest codebook value. Only the bytes matter to the tests (their reference is gguf-py's
dequantization of them), not how close they are to llama.cpp's choice."""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as Q

from hearth.formats.weights import IQ4_KVALUES

KVALUES = np.array(IQ4_KVALUES, dtype=np.float32)


def _block_max(x: np.ndarray) -> np.ndarray:
    """x: [..., 32] -> its largest-magnitude value, sign kept: [..., 1]."""
    return np.take_along_axis(x, np.abs(x).argmax(-1)[..., None], -1)


def _indices(x: np.ndarray, dl: np.ndarray) -> np.ndarray:
    """x: [..., 32], dl: [..., 1] -> nearest codebook indices of x / dl, packed as ggml does (per 32
    weights 16 bytes: weight j in the low nibble of byte j, weight j + 16 in its high nibble)."""
    scaled = np.divide(x, dl, out=np.zeros_like(x), where=dl != 0)
    idx = np.abs(scaled[..., None] - KVALUES).argmin(-1).astype(np.uint8)
    return idx[..., :16] | (idx[..., 16:] << 4)


def quantize_iq4_nl(w: np.ndarray) -> np.ndarray:
    """f32 [rows, K] -> uint8 [rows, K / 32 * 18]: per block f16 d, then 16 bytes of indices."""
    x = w.astype(np.float32).reshape(w.shape[0], -1, 32)
    d = (_block_max(x) / KVALUES[0]).astype(np.float16)
    blocks = np.concatenate([d.view(np.uint8), _indices(x, d.astype(np.float32))], axis=-1)
    return blocks.reshape(w.shape[0], -1)


def quantize_iq4_xs(w: np.ndarray) -> np.ndarray:
    """f32 [rows, K] -> uint8 [rows, K / 256 * 136]: per superblock f16 d, scales_h (u16), scales_l[4],
    qs[128]; sub-block scale d * (ls - 32) with ls 6 bits."""
    x = w.astype(np.float32).reshape(w.shape[0], -1, 8, 32)
    scales = _block_max(x)[..., 0] / KVALUES[0]  # [rows, nb, 8]
    d = (_block_max(scales) / -32).astype(np.float16)  # the largest sub-scale at l = -32
    df = d.astype(np.float32)
    l = np.clip(np.rint(np.divide(scales, df, out=np.zeros_like(scales), where=df != 0)), -32, 31)
    ls = (l + 32).astype(np.uint16)  # [rows, nb, 8]
    qs = _indices(x, (df * l)[..., None]).reshape(*x.shape[:2], 128)
    lo = (ls & 0x0F).astype(np.uint8)
    scales_l = lo[..., 0::2] | (lo[..., 1::2] << 4)  # [rows, nb, 4]
    scales_h = ((ls >> 4) << (2 * np.arange(8, dtype=np.uint16))).sum(-1, dtype=np.uint16)[..., None]
    blocks = np.concatenate([d.view(np.uint8), scales_h.view(np.uint8), scales_l, qs], axis=-1)
    return blocks.reshape(w.shape[0], -1)


QUANTIZERS = {Q.IQ4_NL: quantize_iq4_nl, Q.IQ4_XS: quantize_iq4_xs}
