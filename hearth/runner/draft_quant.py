"""The draft model's weights at fewer bits (speculative_config.draft_quant).

A draft step reads all of the draft's weights, so its cost is its bytes: Qwen2.5-Coder-0.5B's
Q4_K_M file keeps most matrices at Q5_0 and its head at Q8_0 (rows of 896 are no whole number of
the K-quants' 256-blocks), 392 MB a step against the 1.5B target's 1,117 MB, and the draft's share
of a step bounds what speculation gains (docs/speculative.md). Re-encoded at Q4_0 the same draft
reads ~250 MB. Its drafts are a little worse but stay lossless: the target verifies every one.

Each matrix that holds more bits per weight than the chosen type is dequantized and encoded again
by gguf's reference encoder; the result is kept in the repack cache, so only the first load pays."""

from __future__ import annotations

import copy

import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf import quants as gq

from hearth.layers.repack_cache import cached_blob
from hearth.loader.gguf_loader import GGUFFile, GGUFTensor, head_tensor


def _bits(qtype: GGMLQuantizationType) -> float:
    block, size = GGML_QUANT_SIZES[qtype]
    return size * 8 / block


def _encode(t: GGUFTensor, to: GGMLQuantizationType, backend) -> GGUFTensor:
    rows = t.shape[0]
    block, size = GGML_QUANT_SIZES[to]
    row_bytes = t.shape[1] // block * size

    def build() -> torch.Tensor:
        f32 = backend.embedding(t)(torch.arange(rows)).float().cpu()  # [rows, cols]: the backend's row decoder
        return torch.from_numpy(gq.quantize(f32.numpy(), to).reshape(-1))

    blob = cached_blob(f"requant-{to.name}", [t], rows * row_bytes, build)
    return GGUFTensor(t.name, to, t.shape, blob.numpy().reshape(rows, row_bytes))


def requantized(g: GGUFFile, name: str, backend) -> GGUFFile:
    """g seen with every matrix of more bits per weight than the type `name` (q4_0, ...) encoded at
    that type (vectors, and matrices whose rows are no whole number of its blocks, as they are)."""
    to = GGMLQuantizationType[name.upper()]
    block = GGML_QUANT_SIZES[to][0]
    head = head_tensor(g).name
    # a step reads one embedding row per token: the table is worth re-encoding only as the tied head
    lookup_only = {"token_embd.weight"} - {head}
    view = copy.copy(g)
    view.tensors = {n: (_encode(t, to, backend) if len(t.shape) == 2 and t.shape[1] % block == 0 and n not in lookup_only
                        and _bits(t.qtype) > _bits(to) else t)
                    for n, t in g.tensors.items()}
    return view
