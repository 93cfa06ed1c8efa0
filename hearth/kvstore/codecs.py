"""KV-cache storage formats (`--kv-cache-dtype`): each codec allocates a layer's block storage and
says what it costs, so the allocator and `hearth plan` agree byte for byte.

Plain formats (f16, bf16) store K/V as computed, one tensor a layer that the attention kernels read
in place. Quantized formats (fp8_e4m3, q8_0, q4_0, kvarn_k4v2, kvarn_k4v4) pair a block quantizer
for K with one for V; a layer's cache is then a `QuantizedKVCache` (hearth.kvstore.paged): full
blocks encoded once, the block being filled (and KVarN's first block) kept in an f16 staging area.

Codec interface (what llm.py, the runner and the planner tests use):
  name, format (the planner's KVFormat), quantized, staging_blocks
  block_size(requested) -> the block size to run with (KVarN: its tile, 128 or 64)
  check(block_size, head_dim) -> raises UnsupportedError where the format cannot hold that geometry
  block_bytes(block_size, kv_heads, head_dim) -> bytes of one block of one layer, K and V
  staging_bytes(block_size, kv_heads, head_dim) -> f16 staging bytes per sequence per layer
  shape/dtype (plain only); k, v block quantizers (quantized only): fields / encode / decode and
  their slow twins encode_ref / decode_ref; rotation(head_dim) -> [d, d] matrix or None."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from hearth.config import LayerCache
from hearth.errors import UnsupportedError
from hearth.formats.kv import KV_FORMATS, KVFormat, canonical, kv_format
from hearth.kvstore.fp8 import FP8E4M3
from hearth.kvstore.ggml import Q4_0, Q8_0
from hearth.kvstore.kvarn import KVarNKeys, KVarNValues, hadamard

STAGING_DTYPE = torch.float16


@dataclass(frozen=True, slots=True)
class PlainCodec:
    name: str
    dtype: torch.dtype
    quantized = False
    staging_blocks = 0

    @property
    def format(self) -> KVFormat:
        return kv_format(self.name)

    def block_size(self, requested: int | None = None, default: int = 16) -> int:
        return requested or default

    def block_bytes(self, block_size: int, kv_heads: int, head_dim: int) -> int:
        """Bytes of one block of one layer, K and V."""
        return 2 * block_size * kv_heads * head_dim * self.dtype.itemsize

    def check(self, block_size: int, head_dim: int) -> None:
        """Every geometry fits a plain format."""

    def staging_bytes(self, block_size: int, kv_heads: int, head_dim: int) -> int:
        return 0

    def shape(self, num_blocks: int, block_size: int, kv_heads: int, head_dim: int) -> tuple[int, ...]:
        # [2 (k, v), num_blocks, block_size, kv_heads, head_dim]
        return (2, num_blocks, block_size, kv_heads, head_dim)


@dataclass(frozen=True, slots=True)
class QuantCodec:
    name: str
    k: object
    v: object
    sink: bool = False
    """Keep each sequence's first block in f16 too (KVarN)."""
    rotate: bool = False
    """Store K/V rotated by a normalized Hadamard matrix; queries are rotated, outputs un-rotated."""
    tiles: tuple[int, ...] = field(default=())
    quantized = True

    @property
    def format(self) -> KVFormat:
        return kv_format(self.name)

    @property
    def staging_blocks(self) -> int:
        return 1 + int(self.sink)

    def block_size(self, requested: int | None = None, default: int = 16) -> int:
        if not self.tiles:
            return requested or default
        if requested in self.tiles:
            return requested
        if requested and requested != default:
            raise UnsupportedError(f"{self.name} needs a block (tile) size of "
                                   f"{' or '.join(map(str, self.tiles))}, not {requested}")
        return self.tiles[0]

    def check(self, block_size: int, head_dim: int) -> None:
        if self.tiles and block_size not in self.tiles:
            raise UnsupportedError(f"{self.name} needs a block size of {' or '.join(map(str, self.tiles))}, "
                                   f"not {block_size}")
        if head_dim % (m := self.format.head_dim_multiple):
            raise UnsupportedError(f"{self.name} needs head_dim a multiple of {m}, not {head_dim}")
        if self.rotate and head_dim & (head_dim - 1):
            raise UnsupportedError(f"{self.name} needs a power-of-two head_dim, not {head_dim}")

    def fields(self, block_size: int, kv_heads: int, head_dim: int) -> dict[str, dict]:
        return {"k": self.k.fields(block_size, kv_heads, head_dim), "v": self.v.fields(block_size, kv_heads, head_dim)}

    def block_bytes(self, block_size: int, kv_heads: int, head_dim: int) -> int:
        """Bytes of one block of one layer, K and V, every scale and zero point included."""
        return sum(math.prod(shape) * dtype.itemsize
                   for part in self.fields(block_size, kv_heads, head_dim).values()
                   for shape, dtype in part.values())

    def staging_bytes(self, block_size: int, kv_heads: int, head_dim: int) -> int:
        """Per sequence per layer: the f16 block being filled (and the sink block)."""
        return self.staging_blocks * 2 * block_size * kv_heads * head_dim * STAGING_DTYPE.itemsize

    def rotation(self, head_dim: int) -> torch.Tensor | None:
        return hadamard(head_dim) if self.rotate else None


QUANTIZERS = {q.name: q for q in (FP8E4M3(), Q8_0(), Q4_0(), KVarNKeys(4), KVarNValues(2), KVarNValues(4))}
"""The torch codec of each quantized side of hearth.formats.kv's records, by the side's name."""


def _codec(f: KVFormat) -> PlainCodec | QuantCodec:
    if not f.quantized:
        return PlainCodec(f.name, getattr(torch, f.dtype))
    return QuantCodec(f.name, QUANTIZERS[f.k.name], QUANTIZERS[f.v.name], sink=f.sink, rotate=f.rotate, tiles=f.tiles)


_BUILT = {name: _codec(f) for name, f in KV_FORMATS.items() if f.served}
CODECS = {n: c for n, c in _BUILT.items() if not c.quantized}
"""The plain formats (kept as their own table: tests/memory check every entry at block size 16)."""
QUANTIZED = {n: c for n, c in _BUILT.items() if c.quantized}
ALL_CODECS = {**CODECS, **QUANTIZED}


def get_codec(name: str) -> PlainCodec | QuantCodec:
    """`auto` is f16: the activations hearth computes K/V in round to it without loss that matters."""
    key = canonical(name)
    if key not in ALL_CODECS:
        raise UnsupportedError(f"KV cache dtype {name!r} is not supported; "
                               f"supported: auto, {', '.join(ALL_CODECS)}")
    return ALL_CODECS[key]


def own_kv(caches: tuple[LayerCache, ...]) -> list[LayerCache]:
    """The layers that keep K/V of their own (a KV-shared layer reads its source's; a recurrent or conv layer has
    none): the ones a quantized codec encodes and stages."""
    return [c for c in caches if c.parts == 2]


def cache_block_bytes(codec: PlainCodec | QuantCodec, caches: tuple[LayerCache, ...], block_size: int) -> int:
    """Bytes of one block of every layer (hearth.config.layer_caches): K/V in the codec's format, each layer at its
    own [heads, dim]; another layer's state (a short conv's input) plain (f16 under a quantized codec: its taps are
    read back as computed, as llama.cpp keeps its conv state in full precision; encoding it too is another change);
    a KV-shared or recurrent layer's none (its source's blocks; a slot's state). Raises where the codec cannot hold
    a layer's geometry."""
    total = 0
    for c in caches:
        if c.parts == 2:
            codec.check(block_size, c.dim)
            total += codec.block_bytes(block_size, c.heads, c.dim)
        else:  # parts 1: [1, heads, dim] plain; parts 0: nothing
            total += block_size * c.values * plain_dtype(codec).itemsize
    return total


def cache_staging_bytes(codec: PlainCodec | QuantCodec, caches: tuple[LayerCache, ...], block_size: int) -> int:
    """Per sequence, every layer: the f16 staging of each layer with K/V of its own, at its own [heads, dim]."""
    return sum(codec.staging_bytes(block_size, c.heads, c.dim) for c in own_kv(caches))


def plain_dtype(codec: PlainCodec | QuantCodec) -> torch.dtype:
    """The dtype of what a layer keeps as a plain tensor under the codec: a plain codec's own (K/V and all); under
    a quantized one a short conv's input, in the staging's f16."""
    return STAGING_DTYPE if codec.quantized else codec.dtype
