"""KV-cache bytes of a model for a format: per token, per sequence at a context, and what a decode
step reads. Sliding-window layers hold at most `window` tokens however long the context.

Reserved memory counts whole cache blocks (a sequence of ctx tokens holds ceil(ctx / block) blocks
in every global layer); bytes per token and bytes read use exact token counts. engine_pool is what
hearth's own engine allocates: its pool's blocks hold every layer, sliding or not."""

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
class EnginePool:
    """The KV cache hearth.llm allocates: num_kv_blocks blocks of context when given, else enough
    for max_num_seqs full-length sequences within kv_cache_memory_gb (at least one sequence's
    staging and a block); on top, each sequence's staging reserve in whole blocks, and the f16
    staging itself. One sequence holds the pool less its own reserve."""
    blocks: int
    bytes: float
    context: int
    """Tokens one sequence can hold: the context is lowered to it where longer."""


def engine_pool(shape: ModelShape, fmt: KVFormat, block: int, max_num_seqs: int, ctx: int,
                kv_cache_memory_gb: float, num_kv_blocks: int = 0) -> EnginePool:
    per_block, stage = pool_block_bytes(shape, fmt, block), staging_bytes(shape, fmt, block)
    reserve = math.ceil(stage / per_block)  # hearth.llm: blocks' worth of one running request's staging
    if num_kv_blocks:
        blocks = num_kv_blocks + max_num_seqs * reserve
    else:  # hearth.llm._num_blocks
        wanted = max_num_seqs * (math.ceil(ctx / block) + reserve)
        blocks = max(1 + reserve, min(wanted, int(int(kv_cache_memory_gb * 2**30) // per_block)))
    return EnginePool(blocks, blocks * per_block + max_num_seqs * stage, (blocks - reserve) * block)
