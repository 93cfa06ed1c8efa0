"""A file's small tensors (norm weights, biases, routers) as their own f32 copies, for every model file."""

from __future__ import annotations

import torch

from hearth.layers.quant import dequantize
from hearth.loader.gguf_loader import GGUFFile


def f32(g: GGUFFile, name: str) -> torch.Tensor:
    """A small tensor (norm weight, bias) as its own f32 copy, its shape kept."""
    t = g.tensor(name)
    return dequantize(t.data, t.qtype).reshape(t.shape).clone()


def maybe_f32(g: GGUFFile, name: str) -> torch.Tensor | None:
    """f32, or None where the file has no such tensor."""
    return f32(g, name) if name in g.tensors else None
