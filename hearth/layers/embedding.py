"""Token embedding read straight from the GGUF blocks: only looked-up rows are dequantized.

The same file tensor often doubles as the tied output head (token_embd.weight); the head repacks
it for its kernel, while this module only ever touches the memmapped rows it needs, so no second
expanded copy exists. A backend may decode the rows its own way (hearth.backends.cpu: one C++ call per
lookup, bit-exact like the torch decoder here)."""

from __future__ import annotations

import torch
from torch import nn

from hearth.layers.quant import as_bytes, dequantize, require_supported
from hearth.loader.gguf_loader import GGUFTensor


class Embedding(nn.Module):
    def __init__(self, t: GGUFTensor):
        super().__init__()
        require_supported(t.name, t.qtype)
        self.raw = as_bytes(t.data, t.qtype)  # uint8 [vocab, bytes_per_row], a view of the memmap
        self.qtype = t.qtype
        self.num_embeddings, self.embedding_dim = t.shape

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # ids: [T] int64 -> [T, hidden] f32
        rows = self.raw[ids.reshape(-1)]  # copies only the looked-up rows' bytes
        return dequantize(rows, self.qtype).view(*ids.shape, self.embedding_dim)
