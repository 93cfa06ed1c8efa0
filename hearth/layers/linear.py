"""Linear layers over GGUF weights that stay in their file format.

build_linear(tensor) -> nn.Module with forward(x: [..., in_features] f32) -> [..., out_features] f32.
"""

from __future__ import annotations

import numpy as np
import torch
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize
from torch import nn

from hearth.loader.gguf_loader import GGUFTensor


class DequantLinear(nn.Module):
    """Temporary: expands the weight to f32 at load (to be replaced by quantized kernels)."""

    def __init__(self, tensors: list[GGUFTensor], bias: torch.Tensor | None):
        super().__init__()
        ws = [dequantize(np.asarray(t.data), t.qtype).reshape(t.shape) for t in tensors]
        w = np.concatenate(ws, axis=0)
        self.weight = nn.Parameter(torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32)), requires_grad=False)
        self.bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x @ self.weight.T
        return y + self.bias if self.bias is not None else y


def build_linear(t: GGUFTensor | list[GGUFTensor], bias: torch.Tensor | None = None) -> nn.Module:
    """One weight, or several with the same in_features fused along out_features (q|k|v, gate|up)."""
    return DequantLinear(t if isinstance(t, list) else [t], bias)


class Embedding(nn.Module):
    """Token embedding whose rows are dequantized on lookup."""

    def __init__(self, t: GGUFTensor):
        super().__init__()
        self.t = t

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # ids: [T] -> [T, hidden]
        rows = np.asarray(self.t.data)[ids.numpy()]
        w = dequantize(rows, self.t.qtype).reshape(len(rows), self.t.shape[1])
        return torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32))


def build_embedding(t: GGUFTensor) -> nn.Module:
    return Embedding(t)
