"""KV-cache bytes of a model for a format: what hearth's engine allocates (memory), and what a
decode step reads.

Memory is hearth's paged pool (engine_pool, the arithmetic of hearth.llm): a block holds
`block` tokens of EVERY layer, sliding-window layers too, and a quantized format adds the f16 staging
of max_num_seqs sequences (the runner's staging tensor: the block each fills, KVarN's sink copy). Reads apply the window: the
attention kernels (native C++ and Triton) start at the window's first key, so a sliding
layer reads at most `window` tokens however long the context."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hearth.config import STATE_SNAPSHOTS
from hearth.errors import HearthError
from hearth.memory.kv_formats import KV_FORMATS, KVFormat
from hearth.memory.shape import ModelShape


def layer_token_bytes(shape: ModelShape, fmt: KVFormat, block: int, layer: int) -> float:
    """What the layer keeps per token: nothing where it is KV-shared (it reads its source's) or recurrent (its
    state is a sequence's: state_bytes)."""
    if shape.is_recurrent(layer) or shape.is_kv_shared(layer):
        return 0.0
    return layer_read_bytes(shape, fmt, block, layer)


def layer_read_bytes(shape: ModelShape, fmt: KVFormat, block: int, layer: int) -> float:
    """What the layer reads per token of its context (a KV-shared layer: its source's K/V, of its own shape)."""
    if dim := shape.conv_dim(layer):  # a short conv's input: plain (hearth.kvstore.codecs.plain_dtype)
        return state_format(fmt).k.vector_bytes(dim, block)
    return fmt.token_layer_bytes(shape.kv_heads[layer], *shape.head_dim(layer), block)


def state_format(fmt: KVFormat) -> KVFormat:
    """The format of a layer's plain per-token state (a short conv's input): fmt's own, f16 for a quantized one."""
    return KV_FORMATS["f16"] if fmt.quantized else fmt


def own_kv(shape: ModelShape, layer: int) -> bool:
    """The layer keeps K/V of its own (what a quantized format encodes and stages): attention, not KV-shared."""
    return not (shape.is_recurrent(layer) or shape.is_kv_shared(layer) or shape.conv_dim(layer))


def layer_tokens(shape: ModelShape, layer: int, tokens: int) -> int:
    if shape.conv_dim(layer):  # the conv reads its last `conv_kernel` inputs
        return min(tokens, shape.conv_kernel)
    return min(tokens, shape.sliding_window) if shape.is_sliding(layer) else tokens


def kv_bytes_read(shape: ModelShape, fmt: KVFormat, block: int, tokens: int) -> float:
    """K and V one decode step of a sequence holding `tokens` tokens reads, all layers (windows applied), and
    a recurrent model's state."""
    return shape.state_bytes + sum(layer_read_bytes(shape, fmt, block, i) * layer_tokens(shape, i, tokens)
                                   for i in range(shape.num_layers) if not shape.is_recurrent(i))


def token_bytes(shape: ModelShape, fmt: KVFormat, block: int) -> float:
    """One token's K and V as the pool holds it: every layer, sliding or not."""
    return sum(layer_token_bytes(shape, fmt, block, i) for i in range(shape.num_layers))


def staging_bytes(shape: ModelShape, fmt: KVFormat, block: int) -> float:
    """Per sequence: the full-precision (f16) blocks a quantized format keeps beside its storage."""
    f16 = KV_FORMATS["f16"]  # every layer with K/V of its own, at its own shape; no conv, shared or recurrent one
    return fmt.staging_blocks * block * sum(layer_token_bytes(shape, f16, block, i)
                                            for i in range(shape.num_layers) if own_kv(shape, i))


def sequence_bytes(shape: ModelShape, fmt: KVFormat, block: int) -> float:
    """Per sequence, beside the pool's blocks: a quantized format's staging and a recurrent model's state slot
    (the runner allocates both for max_num_seqs sequences)."""
    return staging_bytes(shape, fmt, block) + shape.state_bytes


def pool_block_bytes(shape: ModelShape, fmt: KVFormat, block: int) -> float:
    """One block of the engine's pool: `block` tokens in every layer, sliding or not (the pool's
    blocks serve all layers: hearth.llm sizes them so)."""
    return block * token_bytes(shape, fmt, block)


@dataclass(frozen=True, slots=True)
class EnginePool:
    """The KV cache hearth.llm allocates: num_kv_blocks blocks of context when given, else enough
    for max_num_seqs full-length sequences within kv_cache_memory_gb less their f16 staging (an
    error where it leaves no block); and that staging. One sequence may hold every block."""
    blocks: int
    bytes: float
    context: int
    """Tokens one sequence can hold: the context is lowered to it where longer."""


SNAPSHOTS = STATE_SNAPSHOTS
"""A recurrent model's state snapshots (prefix-cache hits) the engine keeps by default."""


def engine_pool(shape: ModelShape, fmt: KVFormat, block: int, max_num_seqs: int, ctx: int,
                kv_cache_memory_gb: float | None = None, num_kv_blocks: int = 0, draft: ModelShape | None = None,
                state_snapshots: int = SNAPSHOTS) -> EnginePool:
    """kv_cache_memory_gb None: no bound, every block max_num_seqs sequences of ctx tokens want
    (`hearth plan` asks what a workload needs, then whether it fits the device). draft: the speculative
    draft model, whose f16 K/V sits under the same block ids (hearth.llm adds it to each block's bytes,
    so it takes its share of the bound; it has no staging; with recurrent layers, the target's state copy
    before a verify step and the draft's state and copy, per sequence, as hearth.llm_kv.pool_size counts them).
    state_snapshots: a recurrent model's snapshot pool (one sequence's state each; hearth.llm's with prefix
    caching on)."""
    per_block, stage = pool_block_bytes(shape, fmt, block), sequence_bytes(shape, fmt, block)
    if draft is not None:
        per_block += pool_block_bytes(draft, KV_FORMATS["f16"], block)
        stage += shape.state_bytes + 2 * draft.state_bytes
    fixed = state_snapshots * shape.state_bytes
    blocks = pool_blocks(per_block, stage, block, max_num_seqs, ctx, kv_cache_memory_gb, num_kv_blocks, fixed)
    return EnginePool(blocks, blocks * per_block + max_num_seqs * stage + fixed, blocks * block)


def pool_blocks(per_block: float, stage: float, block: int, max_num_seqs: int, ctx: int,
                kv_cache_memory_gb: float | None, num_kv_blocks: int = 0, fixed: float = 0) -> int:
    """The pool's block count: num_kv_blocks when given, else max_num_seqs sequences of ctx tokens
    within the memory bound less max_num_seqs sequences' `stage` bytes (what the runner allocates per
    sequence beside the pool: a quantized format's f16 staging, a recurrent model's state slot). hearth.llm
    sizes its pool with this. fixed: bytes allocated once beside them (a recurrent model's state snapshots),
    out of the bound too. Staging that leaves no block of the bound is an error naming both settings (a
    one-block pool would cut the context to one block)."""
    if num_kv_blocks:
        return num_kv_blocks
    wanted = max_num_seqs * math.ceil(ctx / block)
    if kv_cache_memory_gb is None:
        return wanted
    bound = int((int(kv_cache_memory_gb * 2**30) - max_num_seqs * stage - fixed) // per_block)
    if bound < 1:
        raise HearthError(f"kv_cache_memory_gb {kv_cache_memory_gb:g} leaves no room for KV blocks beside "
                          f"what max_num_seqs {max_num_seqs} sequences keep ({stage / 2**20:.2f} MiB each: a "
                          "quantized KV cache's staging, a recurrent model's state): raise --kv-cache-memory-gb or "
                          "lower --max-num-seqs")
    return min(wanted, bound)
