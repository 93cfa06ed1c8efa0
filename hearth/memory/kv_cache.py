"""KV-cache bytes of a model for a format: per token, per sequence at a context, and what a decode
step reads. Sliding-window layers hold at most `window` tokens however long the context.

Reserved memory counts whole cache blocks (a sequence of ctx tokens holds ceil(ctx / block) blocks
in every global layer, as hearth's allocator does); bytes per token and bytes read use exact
token counts."""

from __future__ import annotations

import math
from dataclasses import dataclass

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


def pool_block_bytes(shape: ModelShape, fmt: KVFormat, block: int) -> float:
    """One block of the engine's pool: `block` tokens in every layer, sliding or not (the pool's
    blocks serve all layers: hearth.llm sizes them so)."""
    return block * sum(layer_token_bytes(shape, fmt, block, i) for i in range(shape.num_layers))


@dataclass(frozen=True, slots=True)
class ForcedPool:
    """The KV cache of an engine given num_kv_blocks (`--num-kv-blocks`), as hearth.llm builds it:
    those blocks of context, plus each of max_num_seqs sequences' staging reserve in whole blocks,
    plus the f16 staging itself; one sequence holds the pool less its own reserve."""
    blocks: int
    bytes: float
    context: int
    """Tokens one sequence can hold: the context is lowered to it where longer."""


def forced_pool(shape: ModelShape, fmt: KVFormat, block: int, num_kv_blocks: int, max_num_seqs: int) -> ForcedPool:
    per_block, stage = pool_block_bytes(shape, fmt, block), staging_bytes(shape, fmt, block)
    reserve = math.ceil(stage / per_block)  # hearth.llm: blocks' worth of one running request's staging
    blocks = num_kv_blocks + max_num_seqs * reserve
    return ForcedPool(blocks, blocks * per_block + max_num_seqs * stage, (blocks - reserve) * block)
