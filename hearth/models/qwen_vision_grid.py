"""Where each patch of a Qwen-VL image sits, for its tower: the 2-D rotary angles of the patches in the
processor's merge-unit order (transformers' get_vision_position_ids + Qwen2VLVisionRotaryEmbedding; llama.cpp's
positions for ggml_rope_multi in vision mode), and Qwen2.5-VL's windows (get_vision_window_index; llama.cpp's
window_idx / inv_window_idx): which merge units go together, window by window, and how many patches each holds;
Qwen3-VL's learned positions resampled to the grid (transformers' get_vision_interpolation_indices_and_weights,
bilinear with corners aligned; llama.cpp's resize_position_embeddings)."""

from __future__ import annotations

import torch

ROPE_THETA = 10000.0
"""The vision rotary's base (HF's Qwen2-VL/2.5-VL vision rope_theta; llama.cpp's freq_base 10000)."""


def rope_angles(rows: int, cols: int, merge: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin: f32 [rows * cols * merge ** 2, head_dim] for the patches in merge-unit order (unit (r, c), then
    (mh, mw) within it): head_dim / 4 frequencies at the patch's row h, the same at its column w, and that
    half again (rotate-half pairs i with i + head_dim / 2, as HF's rotate_half)."""
    h, w = (t.float() for t in _patch_rows_cols(rows, cols, merge))  # [N] each
    half = head_dim // 2
    inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, half, 2, dtype=torch.float) / half))  # [head_dim / 4]
    angles = torch.cat([h[:, None] * inv_freq, w[:, None] * inv_freq], dim=-1)  # [N, head_dim / 2]
    angles = torch.cat([angles, angles], dim=-1)  # [N, head_dim]
    return angles.cos(), angles.sin()


def _patch_rows_cols(rows: int, cols: int, merge: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each patch's row and column in the patch grid, the patches in merge-unit order: [N] int64 each."""
    r, c, mh, mw = torch.meshgrid(*(torch.arange(n) for n in (rows, cols, merge, merge)), indexing="ij")
    return (r * merge + mh).flatten(), (c * merge + mw).flatten()


def learned_positions(table: torch.Tensor, rows: int, cols: int, merge: int) -> torch.Tensor:
    """table: f32 [side * side, d], a side x side grid row-major -> [rows * cols * merge ** 2, d], each patch's
    position (merge-unit order) read bilinearly from it with the corners aligned: the grid's first and last patch
    on the table's first and last entry. HF's four taps, weights and sum order (its values to the bit on the
    tests' grids)."""
    side = round(table.shape[0] ** 0.5)
    h, w = _patch_rows_cols(rows, cols, merge)
    (h0, h1), (hw0, hw1) = _taps(h, rows * merge, side)
    (w0, w1), (ww0, ww1) = _taps(w, cols * merge, side)
    taps = [(h0, w0, hw0 * ww0), (h0, w1, hw0 * ww1), (h1, w0, hw1 * ww0), (h1, w1, hw1 * ww1)]
    out = torch.zeros(len(h), table.shape[1])
    for y, x, weight in taps:
        out += table[y * side + x] * weight[:, None]
    return out


def _taps(index: torch.Tensor, size: int, side: int):
    """Per axis: the two table entries around each of `size` points spread over 0..side - 1, and their weights."""
    src = index.float() * (side - 1) / max(size - 1, 1)
    floor = src.floor()
    frac, low = src - floor, floor.long()
    # HF's hat kernel 1 - |src - tap|, in its own operations (1 - (1 - frac) is not always frac in f32)
    weights = tuple((1 - (frac - k).abs()).clamp(min=0) for k in (0, 1))
    return (low.clamp(0, side - 1), (low + 1).clamp(0, side - 1)), weights


def windows(rows: int, cols: int, side: int) -> tuple[torch.Tensor, list[int]]:
    """(order, units per window): `order` [rows * cols] lists the merge units (row-major indices) window by window,
    the windows side x side units, row-major over the grid, the last of a row or column cut short (HF pads and
    drops the padding: the same); row-major within a window."""
    order, sizes = [], []
    for top in range(0, rows, side):
        for left in range(0, cols, side):
            unit_rows, unit_cols = range(top, min(top + side, rows)), range(left, min(left + side, cols))
            order += [y * cols + x for y in unit_rows for x in unit_cols]
            sizes.append(len(unit_rows) * len(unit_cols))
    return torch.tensor(order), sizes
