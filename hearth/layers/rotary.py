"""Rotary position embedding in both layouts GGUF files use.

llama-arch GGUFs are converted with q/k rows permuted so that rope rotates adjacent pairs
(x[2i], x[2i+1]) -- llama.cpp's LLAMA_ROPE_TYPE_NORM; qwen2/qwen3/gemma3 rotate halves
(x[i], x[i + d/2]) -- LLAMA_ROPE_TYPE_NEOX."""

from __future__ import annotations

import torch
from torch import nn


class Rotary(nn.Module):
    def __init__(self, rot_dim: int, base: float, max_pos: int, neox: bool, scale: float = 1.0):
        super().__init__()
        self.rot_dim, self.neox = rot_dim, neox
        inv_freq = 1.0 / (base ** (torch.arange(0, rot_dim, 2, dtype=torch.float64) / rot_dim))
        t = torch.arange(max_pos, dtype=torch.float64) / scale
        freqs = torch.outer(t, inv_freq)  # [max_pos, rot_dim/2]
        self.register_buffer("cos", freqs.cos().float(), persistent=False)
        self.register_buffer("sin", freqs.sin().float(), persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        # x: [T, heads, head_dim]; positions: [T]
        cos = self.cos[positions].unsqueeze(1)  # [T, 1, rot_dim/2]
        sin = self.sin[positions].unsqueeze(1)
        rot, rest = x[..., : self.rot_dim], x[..., self.rot_dim :]
        if self.neox:
            a, b = rot.chunk(2, dim=-1)
            out = torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)
        else:
            a, b = rot[..., 0::2], rot[..., 1::2]
            out = torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).flatten(-2)
        return torch.cat((out, rest), dim=-1) if rest.numel() else out
