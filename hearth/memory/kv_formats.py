"""Bytes of the KV cache per token, per layer, for every KV format hearth has or plans
(`--kv-cache-dtype`). A format is a codec for K and one for V; each codec says how many bytes one
token's vector of `head_dim` values takes in one KV head, given the cache block (tile) size.

Overhead model (all scales and zero points included):
  f32 / f16 / bf16   plain values.
  fp8_e4m3           1 byte a value + one f32 scale per KV head per cache block (4 / block a token).
  q8_0 / q4_0        ggml blocks of 32 values: 34 bytes (f16 scale + 32 int8) / 18 bytes (f16
                     scale + 16 bytes of nibbles); head_dim must be a multiple of 32.
  kvarn_k4v2 / k4v4  K: 4 bits a value + an f16 scale and f16 zero point per channel per tile
                     (per-channel asymmetric, so 4 bytes a channel / tile tokens); V: 2 or 4 bits a
                     value + an f16 scale and zero point per token per head (per-token asymmetric);
                     each side also keeps the other axis's f16 normalization scale (K: one per
                     token, V: one per channel per tile).
                     The tile is the cache block: 64 or 128 tokens.
Quantized formats also keep a full-precision (f16) staging copy of the block being filled, and
KVarN of the first ("sink") block of each sequence: `staging_blocks` per sequence per layer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from hearth.memory import PlanError

F16_BYTES = 2


class Codec(Protocol):
    def vector_bytes(self, head_dim: int, tile: int) -> float:
        """Bytes of one token's head_dim values in one KV head, in a cache block of `tile` tokens."""


@dataclass(frozen=True, slots=True)
class Plain:
    bytes_per_value: float

    def vector_bytes(self, head_dim: int, tile: int) -> float:
        return head_dim * self.bytes_per_value


@dataclass(frozen=True, slots=True)
class GGMLBlocks:
    values: int
    block_bytes: int

    def vector_bytes(self, head_dim: int, tile: int) -> float:
        if head_dim % self.values:
            raise PlanError(f"head_dim {head_dim} is not a multiple of the {self.values}-value KV block")
        return head_dim // self.values * self.block_bytes


@dataclass(frozen=True, slots=True)
class ScalePerBlock:
    """Values of `bytes_per_value`, one scale of `scale_bytes` per head per cache block of `tile` tokens."""

    bytes_per_value: float
    scale_bytes: int

    def vector_bytes(self, head_dim: int, tile: int) -> float:
        return head_dim * self.bytes_per_value + self.scale_bytes / tile


@dataclass(frozen=True, slots=True)
class PerChannel:
    """`bits` a value; scale + zero point (`meta_bytes`) for each channel of each tile, plus
    `token_bytes` for each token (KVarN's cross-axis normalization scale)."""

    bits: int
    meta_bytes: int
    token_bytes: int = 0

    def vector_bytes(self, head_dim: int, tile: int) -> float:
        return head_dim * self.bits / 8 + head_dim * self.meta_bytes / tile + self.token_bytes


@dataclass(frozen=True, slots=True)
class PerToken:
    """`bits` a value; scale + zero point (`meta_bytes`) for each token's vector, plus
    `channel_bytes` for each channel of each tile (KVarN's cross-axis normalization scale)."""

    bits: int
    meta_bytes: int
    channel_bytes: int = 0

    def vector_bytes(self, head_dim: int, tile: int) -> float:
        return head_dim * self.bits / 8 + self.meta_bytes + head_dim * self.channel_bytes / tile


@dataclass(frozen=True, slots=True)
class KVFormat:
    name: str
    k: Codec
    v: Codec
    staging_blocks: int = 0
    tiles: tuple[int, ...] = ()
    """Block sizes the format requires (empty = any); the first is its default."""
    about: str = ""

    def token_layer_bytes(self, kv_heads: int, head_dim_k: int, head_dim_v: int, block: int) -> float:
        """K and V of one token in one layer, all its KV heads."""
        return kv_heads * (self.k.vector_bytes(head_dim_k, block) + self.v.vector_bytes(head_dim_v, block))

    def block_size(self, requested: int | None, default: int) -> int:
        if not self.tiles:
            return requested or default
        if requested and requested not in self.tiles:
            raise PlanError(f"{self.name} needs a block (tile) size of {' or '.join(map(str, self.tiles))}, "
                            f"not {requested}")
        return requested or self.tiles[0]


def _same(codec, **kw) -> dict:
    return dict(k=codec, v=codec, **kw)


KV_FORMATS: dict[str, KVFormat] = {f.name: f for f in (
    KVFormat("f32", **_same(Plain(4)), about="4 bytes a value"),
    KVFormat("f16", **_same(Plain(2)), about="2 bytes a value"),
    KVFormat("bf16", **_same(Plain(2)), about="2 bytes a value"),
    KVFormat("fp8_e4m3", **_same(ScalePerBlock(1, 4)), staging_blocks=1,
             about="1 byte a value + an f32 scale per head per block"),
    KVFormat("q8_0", **_same(GGMLBlocks(32, 34)), staging_blocks=1, about="34 bytes per 32 values"),
    KVFormat("q4_0", **_same(GGMLBlocks(32, 18)), staging_blocks=1, about="18 bytes per 32 values"),
    KVFormat("kvarn_k4v2", PerChannel(4, 2 * F16_BYTES, F16_BYTES), PerToken(2, 2 * F16_BYTES, F16_BYTES),
             staging_blocks=2,
             tiles=(128, 64), about="K 4-bit per-channel, V 2-bit per-token, f16 scale+zero"),
    KVFormat("kvarn_k4v4", PerChannel(4, 2 * F16_BYTES, F16_BYTES), PerToken(4, 2 * F16_BYTES, F16_BYTES),
             staging_blocks=2,
             tiles=(128, 64), about="K 4-bit per-channel, V 4-bit per-token, f16 scale+zero"),
)}
# `auto` is the model dtype: hearth keeps the KV cache in f16 (see hearth.llm)
ALIASES = {"auto": "f16", "fp16": "f16", "float16": "f16", "bfloat16": "bf16", "float32": "f32", "fp8": "fp8_e4m3"}


def kv_format(name: str) -> KVFormat:
    key = ALIASES.get(name.lower(), name.lower())
    try:
        return KV_FORMATS[key]
    except KeyError:
        raise PlanError(f"unknown KV cache dtype {name!r}; known: auto, {', '.join(KV_FORMATS)}") from None
