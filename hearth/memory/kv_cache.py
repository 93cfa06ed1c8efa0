"""KV-cache bytes of a model for a format: per token, per sequence at a context, and what a decode
step reads. Sliding-window layers hold at most `window` tokens however long the context.

Reserved memory counts whole cache blocks (a sequence of ctx tokens holds ceil(ctx / block) blocks
in every global layer, as hearth's allocator does); bytes per token and bytes read use exact
token counts."""

from __future__ import annotations

import math

from hearth.memory.kv_formats import KV_FORMATS, KVFormat
from hearth.memory.shape import ModelShape


def layer_token_bytes(shape: ModelShape, fmt: KVFormat, block: int, layer: int) -> float:
    return fmt.token_layer_bytes(shape.kv_heads[layer], shape.head_dim_k, shape.head_dim_v, block)


def layer_tokens(shape: ModelShape, layer: int, tokens: int) -> int:
    return min(tokens, shape.sliding_window) if shape.is_sliding(layer) else tokens


def kv_bytes_at(shape: ModelShape, fmt: KVFormat, block: int, tokens: int) -> float:
    """K and V of one sequence holding `tokens` tokens, all layers (windows applied)."""
    return sum(layer_token_bytes(shape, fmt, block, i) * layer_tokens(shape, i, tokens)
               for i in range(shape.num_layers))


def kv_bytes_per_token(shape: ModelShape, fmt: KVFormat, block: int, ctx: int) -> float:
    """All layers, averaged over a full context of ctx tokens (sliding layers cap at their window)."""
    return kv_bytes_at(shape, fmt, block, ctx) / ctx


def staging_bytes(shape: ModelShape, fmt: KVFormat, block: int) -> float:
    """Per sequence: the full-precision (f16) blocks a quantized format keeps beside its storage."""
    f16 = KV_FORMATS["f16"]
    return fmt.staging_blocks * block * sum(layer_token_bytes(shape, f16, block, i)
                                            for i in range(shape.num_layers))


def reserved_per_sequence(shape: ModelShape, fmt: KVFormat, block: int, ctx: int) -> float:
    """What the allocator sets aside for one sequence of up to ctx tokens: whole blocks + staging."""
    padded = math.ceil(ctx / block) * block
    return kv_bytes_at(shape, fmt, block, padded) + staging_bytes(shape, fmt, block)
