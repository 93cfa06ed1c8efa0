"""KV-cache formats (`--kv-cache-dtype`): one record each, built from one record per side (K or V)
codec. A side says how many bytes one token's vector of `head_dim` values takes in one KV head,
given the cache block (tile) size, and which id the C++ readers know it by (csrc/kv_decode.h's
KvqFormat, checked by tests/formats). Its torch codec (encode/decode and their slow twins) is the
hearth.kvstore quantizer of the same name; hearth.kvstore.codecs builds the runtime codecs, and the
planner (hearth.memory) prices them, from these records.

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

from hearth.errors import PlanError

F16_BYTES = 2


class Cost(Protocol):
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
class KVSide:
    """The codec of one side (K or V) of a KV format."""

    name: str
    """Quantized sides: the name of its hearth.kvstore quantizer (its torch codec)."""
    cost: Cost
    native_id: int | None = None
    """Its KvqFormat in csrc/kv_decode.h (quantized sides the C++ readers decode), else None."""

    def vector_bytes(self, head_dim: int, tile: int) -> float:
        return self.cost.vector_bytes(head_dim, tile)

    @property
    def head_dim_multiple(self) -> int:
        return getattr(self.cost, "values", 1)


STAGING = KVSide("f16", Plain(F16_BYTES), native_id=0)
"""The f16 staging blocks of every quantized cache (KVQ_F16: read by the same C++ readers)."""


@dataclass(frozen=True, slots=True)
class KVFormat:
    name: str
    k: KVSide
    v: KVSide
    dtype: str | None = None
    """Plain formats: the torch dtype (by name) the cache holds K/V in; None for quantized ones."""
    sink: bool = False
    """Keep each sequence's first block in f16 too (KVarN)."""
    rotate: bool = False
    """Store K/V rotated by a normalized Hadamard matrix (needs a power-of-two head_dim)."""
    tiles: tuple[int, ...] = ()
    """Block sizes the format requires (empty = any); the first is its default."""
    served: bool = True
    """hearth's runtime can hold a cache in it (False: the planner prices it only)."""
    about: str = ""

    @property
    def quantized(self) -> bool:
        return self.dtype is None

    @property
    def staging_blocks(self) -> int:
        """f16 blocks per sequence per layer: the block being filled (and the sink block)."""
        return 1 + int(self.sink) if self.quantized else 0

    @property
    def head_dim_multiple(self) -> int:
        return max(self.k.head_dim_multiple, self.v.head_dim_multiple)

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


def _same(side: KVSide, **kw) -> dict:
    return dict(k=side, v=side, **kw)


_KVARN = dict(sink=True, rotate=True, tiles=(128, 64))
KVARN_K4 = KVSide("kvarn_k4", PerChannel(4, 2 * F16_BYTES, F16_BYTES), native_id=4)

KV_FORMATS: dict[str, KVFormat] = {f.name: f for f in (
    KVFormat("f32", **_same(KVSide("f32", Plain(4))), dtype="float32", served=False, about="4 bytes a value"),
    KVFormat("f16", **_same(STAGING), dtype="float16", about="2 bytes a value"),
    KVFormat("bf16", **_same(KVSide("bf16", Plain(2))), dtype="bfloat16", about="2 bytes a value"),
    KVFormat("fp8_e4m3", **_same(KVSide("fp8_e4m3", ScalePerBlock(1, 4), native_id=1)),
             about="1 byte a value + an f32 scale per head per block"),
    KVFormat("q8_0", **_same(KVSide("q8_0", GGMLBlocks(32, 34), native_id=2)), about="34 bytes per 32 values"),
    KVFormat("q4_0", **_same(KVSide("q4_0", GGMLBlocks(32, 18), native_id=3)), about="18 bytes per 32 values"),
    KVFormat("kvarn_k4v2", KVARN_K4, KVSide("kvarn_v2", PerToken(2, 2 * F16_BYTES, F16_BYTES), native_id=5),
             **_KVARN, about="K 4-bit per-channel, V 2-bit per-token, f16 scale+zero"),
    KVFormat("kvarn_k4v4", KVARN_K4, KVSide("kvarn_v4", PerToken(4, 2 * F16_BYTES, F16_BYTES), native_id=6),
             **_KVARN, about="K 4-bit per-channel, V 4-bit per-token, f16 scale+zero"),
)}
# `auto` is the model dtype: hearth keeps the KV cache in f16 (see hearth.llm)
ALIASES = {"auto": "f16", "fp16": "f16", "float16": "f16", "bfloat16": "bf16", "float32": "f32", "fp8": "fp8_e4m3"}


def sides() -> dict[str, KVSide]:
    """Every distinct side codec by name, the f16 staging one included."""
    out = {STAGING.name: STAGING}
    for f in KV_FORMATS.values():
        out.update({f.k.name: f.k, f.v.name: f.v})
    return out


NATIVE_SIDES: dict[str, int] = {s.name: s.native_id for s in sides().values()
                                if s.native_id is not None and s.name != STAGING.name}
"""Quantized side name -> csrc/kv_decode.h's KvqFormat (hearth.kernels.native.KVQ_FORMATS)."""


def canonical(name: str) -> str:
    return ALIASES.get(name.lower(), name.lower())


def kv_format(name: str) -> KVFormat:
    try:
        return KV_FORMATS[canonical(name)]
    except KeyError:
        raise PlanError(f"unknown KV cache dtype {name!r}; known: auto, {', '.join(KV_FORMATS)}") from None


SERVED_KV = tuple(name for name, f in KV_FORMATS.items() if f.served)
"""The formats hearth's runtime holds a cache in: the one list of --kv-cache-dtype choices (serve's,
run's and plan's; kvstore.codecs builds exactly these). f32 stays a record for pricing only."""


def served_kv_format(name: str) -> KVFormat:
    """A user's --kv-cache-dtype: only a format serve takes, so a plan is one it can run."""
    fmt = KV_FORMATS.get(canonical(name))
    if fmt is None or not fmt.served:
        what = "unknown KV cache dtype" if fmt is None else "hearth does not serve the KV cache dtype"
        raise PlanError(f"{what} {name!r}; known: auto, {', '.join(SERVED_KV)}")
    return fmt
