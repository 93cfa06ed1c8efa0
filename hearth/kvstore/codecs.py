"""KV-cache storage formats (`--kv-cache-dtype`): each codec allocates a layer's block storage and
says what it costs, so the allocator and `hearth plan` agree byte for byte.

Plain formats store K/V as they are computed; the attention kernels read them in place. Quantized
formats (fp8, q8_0, q4_0, KVarN) add encode/decode and a full-precision staging block here."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hearth.errors import UnsupportedError
from hearth.memory.kv_formats import KVFormat, kv_format


@dataclass(frozen=True, slots=True)
class PlainCodec:
    name: str
    dtype: torch.dtype

    @property
    def format(self) -> KVFormat:
        return kv_format(self.name)

    def block_bytes(self, block_size: int, kv_heads: int, head_dim: int) -> int:
        """Bytes of one block of one layer, K and V."""
        return 2 * block_size * kv_heads * head_dim * self.dtype.itemsize

    def shape(self, num_blocks: int, block_size: int, kv_heads: int, head_dim: int) -> tuple[int, ...]:
        # [2 (k, v), num_blocks, block_size, kv_heads, head_dim]
        return (2, num_blocks, block_size, kv_heads, head_dim)


CODECS = {c.name: c for c in (PlainCodec("f16", torch.float16), PlainCodec("bf16", torch.bfloat16))}


def get_codec(name: str) -> PlainCodec:
    """`auto` is f16: the activations hearth computes K/V in round to it without loss that matters."""
    key = {"auto": "f16", "fp16": "f16", "float16": "f16", "bfloat16": "bf16"}.get(name.lower(), name.lower())
    if key not in CODECS:
        raise UnsupportedError(f"KV cache dtype {name!r} is not supported yet; "
                               f"supported: auto, {', '.join(CODECS)}")
    return CODECS[key]
