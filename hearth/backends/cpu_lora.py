"""The CPU backend's LoRA decode: a step where an adapter is on goes through every layer in one C++ call
(hearth.kernels.fused_lora) as the base model's decode does (NativeStack), each linear's low-rank term
added in C++ after its matmul, instead of the layers op by op (measured 0.44x of the base model's decode
on SmolLM2-135M). Prefill chunks, and steps the stack does not cover, still run op by op."""

from __future__ import annotations

import torch

from hearth.kernels.fused_lora import FusedLora, FusedLoraStack, LoraParts
from hearth.layers.lora import LoraLinear, LoraRows


class NativeLoraStack:
    """A NativeStack's layers with their LoRA terms: run(...) as NativeStack.run, for decode-sized steps."""

    def __init__(self, stack, rows: LoraRows, loras: list[FusedLora | None]):
        self.stack, self.rows, self.n = stack, rows, len(loras)
        self.fused = FusedLoraStack(stack.fused, loras)

    def run(self, x, positions, meta, kv_caches, out_rows) -> tuple[int, torch.Tensor]:
        """(layers run, x after them: out_rows' rows when all ran); (0, x) for a prefill-sized step,
        or where the stack does not cover it (the layers op by op go on from there)."""
        if x.shape[0] >= self.stack.min_rows or not self.stack.covers(meta) or self.rows.scales is None:
            return 0, x
        done = self.fused.decode(x, self.stack._tables(positions, meta), kv_caches, meta, self.rows.scales)
        return done, (x if out_rows is None or done < self.n else x[out_rows])


def _parts(lin) -> LoraParts | None:
    return (lin.a_t, lin.b_t, lin.col_adapter, lin.col_factor, lin.spans) if isinstance(lin, LoraLinear) else None


def native_lora_stack(stack, layers, rows: LoraRows) -> NativeLoraStack:
    """stack: the model's NativeStack, whose fused layers hold the base linears' plans (LoraLinear wraps
    the same linear); each layer's terms from its LoraLinears."""
    loras = []
    for layer in layers:
        parts = [_parts(lin) for lin in (layer.attn.qkv, layer.attn.o, layer.mlp.gate_up, layer.mlp.down)]
        loras.append(None if all(p is None for p in parts) else FusedLora(parts))
    return NativeLoraStack(stack, rows, loras)
