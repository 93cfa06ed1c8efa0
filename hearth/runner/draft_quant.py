"""The draft model's weights at fewer bits (speculative_config.draft_quant).

A draft step reads all of the draft's weights, so its cost is its bytes: Qwen2.5-Coder-0.5B's
Q4_K_M file keeps most matrices at Q5_0 and its head at Q8_0 (rows of 896 are no whole number of
the K-quants' 256-blocks), 392 MB a step against the 1.5B target's 1,117 MB, and the draft's share
of a step bounds what speculation gains (docs/speculative.md). Re-encoded at Q4_0 the same draft
reads 278 MB. Its drafts are a little worse but stay lossless: the target verifies every one.

Each matrix that holds more bits per weight than the chosen type is decoded by the backend's row
decoder and encoded again by gguf's reference encoder; the result is kept in the repack cache, so
only the first load pays."""

from __future__ import annotations

import copy
from importlib.metadata import version

import torch
from gguf import GGMLQuantizationType
from gguf import quants as gq

from hearth.backends import Backend
from hearth.formats.weights import WEIGHT_FORMATS
from hearth.layers.repack_cache import cached_blob
from hearth.loader.gguf_loader import GGUFFile, GGUFTensor, head_tensor

CHUNK_ROWS = 8192
"""Rows decoded and encoded at a time: a 151,936-row head never sits in memory whole as f32."""


def _narrowed(t: GGUFTensor, to: GGMLQuantizationType, skip: set[str]) -> bool:
    """t is worth re-encoding at `to`: a matrix of more bits per weight, its rows whole blocks of `to`."""
    fmt, have = WEIGHT_FORMATS[to], WEIGHT_FORMATS.get(t.qtype)
    return (len(t.shape) == 2 and t.name not in skip and t.shape[1] % fmt.block_size == 0
            and have is not None and have.bits > fmt.bits)


def _encode(t: GGUFTensor, to: GGMLQuantizationType, backend: Backend) -> GGUFTensor:
    rows, fmt = t.shape[0], WEIGHT_FORMATS[to]
    row_bytes = t.shape[1] // fmt.block_size * fmt.type_size

    def build() -> torch.Tensor:
        decode, out = backend.embedding(t), torch.empty(rows, row_bytes, dtype=torch.uint8)
        for r in range(0, rows, CHUNK_ROWS):
            f32 = decode(torch.arange(r, min(r + CHUNK_ROWS, rows))).float().cpu()  # [chunk, cols]
            out[r:r + CHUNK_ROWS] = torch.from_numpy(gq.quantize(f32.numpy(), to))
        return out.view(-1)

    # the encoder's version names the entry: a gguf-py that encodes differently makes a new one
    blob = cached_blob(f"requant-{to.name}-gguf{version('gguf')}", [t], rows * row_bytes, build)
    # a plain array, not the file's map: the cache never files anything under it (repack_cache._file_dir)
    return GGUFTensor(t.name, to, t.shape, blob.numpy().reshape(rows, row_bytes))


def requantized(g: GGUFFile, name: str, backend: Backend) -> GGUFFile:
    """g seen with every matrix of more bits per weight than the type `name` (q4_0, ...) encoded at
    that type (vectors, and matrices whose rows are no whole number of its blocks, as they are)."""
    to = GGMLQuantizationType[name.upper()]
    # a step reads one embedding row per token: the table is worth re-encoding only as the tied head
    skip = {"token_embd.weight"} - {head_tensor(g).name}
    view = copy.copy(g)
    view.tensors = {n: _encode(t, to, backend) if _narrowed(t, to, skip) else t for n, t in g.tensors.items()}
    return view
