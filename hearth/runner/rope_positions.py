"""A step's rope positions for an M-RoPE model (ModelConfig.rope_sections: Qwen2-VL's, Qwen3-VL's text model): each
sequence's token indices moved by its images (hearth.media.mrope). A step with no image row among its tokens
stays [T], one position per token (every native and fused path as for any model); one with image rows is
[3, T], (t, h, w) per token, text rows with three equal ones (Rotary.halves reads both)."""

from __future__ import annotations

import torch

from hearth.media.mrope import positions


def mrope_positions(seqs: list, index: torch.Tensor, qsl: list[int]) -> torch.Tensor:
    """index: [T] int64, each token's index in its sequence (a tree node's: its path's) -> [T] or [3, T] int64.
    seqs: the step's ScheduledSequences (rope_delta, media), sequence i's rows at qsl[i]:qsl[i + 1]. In Python
    lists, one tensor at the end: a decode step of 16 sequences took ~0.4 ms in per-sequence tensor ops."""
    if not any(s.rope_delta or s.media for s in seqs):
        return index
    flat = index.tolist()
    if not any(m.grid is not None for s in seqs for m in s.media):
        return torch.tensor([p + s.rope_delta for i, s in enumerate(seqs) for p in flat[qsl[i]:qsl[i + 1]]])
    thw: list[list[int]] = [[], [], []]
    for i, s in enumerate(seqs):
        rows = positions(flat[qsl[i]:qsl[i + 1]], s.rope_delta, s.media)  # text only: its indices + rope_delta
        for out, part in zip(thw, rows):
            out += part
    return torch.tensor(thw)
