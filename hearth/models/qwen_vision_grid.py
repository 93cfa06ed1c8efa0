"""Where each patch of a Qwen-VL image sits, for its tower: the 2-D rotary angles of the patches in the
processor's merge-unit order (transformers' get_vision_position_ids + Qwen2VLVisionRotaryEmbedding; llama.cpp's
positions for ggml_rope_multi in vision mode), and Qwen2.5-VL's windows (get_vision_window_index; llama.cpp's
window_idx / inv_window_idx): which merge units go together, window by window, and how many patches each holds."""

from __future__ import annotations

import torch

ROPE_THETA = 10000.0
"""The vision rotary's base (HF's Qwen2-VL/2.5-VL vision rope_theta; llama.cpp's freq_base 10000)."""


def rope_angles(rows: int, cols: int, merge: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin: f32 [rows * cols * merge ** 2, head_dim] for the patches in merge-unit order (unit (r, c), then
    (mh, mw) within it): head_dim / 4 frequencies at the patch's row h, the same at its column w, and that
    half again (rotate-half pairs i with i + head_dim / 2, as HF's rotate_half)."""
    r, c, mh, mw = torch.meshgrid(*(torch.arange(n) for n in (rows, cols, merge, merge)), indexing="ij")
    h, w = (r * merge + mh).flatten().float(), (c * merge + mw).flatten().float()  # [N] each
    half = head_dim // 2
    inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, half, 2, dtype=torch.float) / half))  # [head_dim / 4]
    angles = torch.cat([h[:, None] * inv_freq, w[:, None] * inv_freq], dim=-1)  # [N, head_dim / 2]
    angles = torch.cat([angles, angles], dim=-1)  # [N, head_dim]
    return angles.cos(), angles.sin()


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
