"""What one model holds while a server serves it, before it is loaded, and how much memory a
server of several models may hold together by default (`hearth serve --max-memory`).

A served model holds its weights as the CPU engine does (hearth.memory.layouts), the KV cache the
engine allocates (hearth.memory.kv_cache.engine_pool: the blocks hearth.llm sizes, every layer's,
with their staging), one step's activations and its tokenizer; with a speculative draft model, the
draft's weights and the draft's K/V under each block too. The runtime (torch and hearth's
libraries) is paid once per process, so it comes off the budget, not off each model."""

from __future__ import annotations

from dataclasses import dataclass

from hearth.memory.devices import KINDS
from hearth.memory.gguf_shape import shape_from_gguf
from hearth.memory.kv_cache import engine_pool
from hearth.memory.kv_formats import kv_format
from hearth.memory.layouts import LAYOUTS, cpu_layout, resident_weight_bytes
from hearth.memory.overhead import activation_bytes, tokenizer_bytes
from hearth.memory.this_machine import system_memory
from hearth.memory.weights import tensors_from_gguf
from hearth.models.registry import embeds_only

DEFAULT_BLOCK = 16  # EngineConfig.block_size
CPU = KINDS["cpu"]


@dataclass(frozen=True, slots=True)
class Footprint:
    weights: int
    kv: int
    other: int
    """One step's activations and the tokenizer."""
    context: int
    """The context length the engine will use (the model's, or the smaller one asked for)."""

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.other


def served_footprint(gguf, max_model_len: int = 0, kv_cache_dtype: str = "auto", max_num_seqs: int = 16,
                     kv_cache_memory_gb: float = 2.0, batch_tokens: int = 2048, num_kv_blocks: int = 0,
                     draft=None, rope_scaling: dict | None = None) -> Footprint:
    """`gguf`: an open GGUFFile (its header only is read). num_kv_blocks: `--num-kv-blocks` (0: sized
    from the rest); given, it is the cache (kv_cache_memory_gb no longer bounds it) and may lower the
    context, as the engine does. draft: the speculative draft model's open GGUFFile (method draft): its
    weights count with the model's, its K/V with the pool's (as its file holds them: draft_quant's
    fewer bits, and a backend that turns speculation off, make this an upper bound). rope_scaling: the engine's
    (EngineConfig.rope_scaling), which stretches the context."""
    shape = shape_from_gguf(gguf, rope_scaling)
    ctx = min(max_model_len or shape.context_length, shape.context_length)
    fmt = kv_format(kv_cache_dtype)
    block = fmt.block_size(None, DEFAULT_BLOCK)
    layout = LAYOUTS[cpu_layout(CPU.layout)]
    weights = resident_weight_bytes(tensors_from_gguf(gguf), shape, layout)
    draft_shape = None if draft is None else shape_from_gguf(draft)
    # a model drafting for itself reads the same mapped pages, unless the layout copies them into tensors
    if draft is not None and (draft.path.resolve() != gguf.path.resolve() or layout.held):
        weights += resident_weight_bytes(tensors_from_gguf(draft), draft_shape, layout)
    if embeds_only(gguf.arch):  # an encoder keeps no K/V between forwards (hearth.engine.encoder_core)
        kv = 0
    else:
        pool = engine_pool(shape, fmt, block, max_num_seqs, ctx, kv_cache_memory_gb, num_kv_blocks, draft_shape)
        kv, ctx = pool.bytes, min(ctx, pool.context)
    other = activation_bytes(shape, CPU.act_bytes, ctx, max_num_seqs, batch_tokens) + tokenizer_bytes(shape)
    return Footprint(int(weights), int(kv), int(other), ctx)


def default_budget() -> int:
    """`hearth plan`'s usable memory of this machine (90% of RAM or the container's limit) less the
    runtime every model shares."""
    return int(system_memory() * CPU.usable_fraction) - CPU.runtime_bytes
