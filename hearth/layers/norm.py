"""RMSNorm with the weight read from the GGUF (f32)."""

from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, weight: torch.Tensor, eps: float, offset: float = 0.0):
        super().__init__()
        # offset: gemma stores (w - 1) in HF checkpoints but the GGUF converter already adds the 1 back
        self.weight = nn.Parameter(weight.float() + offset, requires_grad=False)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [..., dim]
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + self.eps) * self.weight
