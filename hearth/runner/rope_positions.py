"""A step's rope positions for an M-RoPE model (ModelConfig.rope_sections: Qwen2-VL's text model): each
sequence's token indices moved by its images (hearth.media.mrope). A step with no image row among its tokens
stays [T], one position per token (every native and fused path as for any model); one with image rows is
[3, T], (t, h, w) per token, text rows with three equal ones (Rotary.halves reads both)."""

from __future__ import annotations

import torch

from hearth.media.mrope import positions


def mrope_positions(seqs: list, index: torch.Tensor, qsl: list[int]) -> torch.Tensor:
    """index: [T] int64, each token's index in its sequence (a tree node's: its path's) -> [T] or [3, T] int64.
    seqs: the step's ScheduledSequences (rope_delta, media), sequence i's rows at qsl[i]:qsl[i + 1]."""
    if not any(s.rope_delta or s.media for s in seqs):
        return index
    out = index.expand(3, -1).clone()  # [3, T]
    grids = False
    for i, s in enumerate(seqs):
        a, b = qsl[i], qsl[i + 1]
        if any(m.grid is not None for m in s.media):
            out[:, a:b] = torch.tensor(positions(index[a:b].tolist(), s.rope_delta, s.media))
            grids = True
        else:
            out[:, a:b] += s.rope_delta
    return out if grids else out[0].contiguous()
