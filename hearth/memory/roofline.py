"""Speed ceilings: what the hardware allows, not what any engine reaches.

Decode is memory-bound: a step reads the weights it uses once (dense tensors and the head whole,
the routed experts only, one embedding row per sequence) plus every sequence's KV at its context
(a sliding-window layer only its window: the kernels skip older keys);
tokens/s <= bandwidth / bytes. It is also capped by FLOPs / peak compute, which only matters for
large batches. Prefill is compute-bound: FLOPs per token = 2 x active parameters (no head: only
the last prompt token needs logits) + attention (4 x heads x head_dim x keys a token attends to,
averaged over the prompt); it is also capped by reading all the weights once per step of
`batch_tokens` tokens."""

from __future__ import annotations

from dataclasses import dataclass

from hearth.formats.weights import NATIVE_IDS
from hearth.memory.devices import Device
from hearth.memory.kv_cache import kv_bytes_read
from hearth.memory.kv_formats import KVFormat
from hearth.memory.shape import ModelShape
from hearth.memory.weights import WeightTensor, active_matmul_params, decode_weight_bytes, role


def attention_flops(shape: ModelShape, keys_per_layer) -> float:
    """QK^T and PV for one query token: 2 FLOPs a multiply-add over head_dim_k and head_dim_v."""
    per_key = 2 * shape.num_heads * (shape.head_dim_k + shape.head_dim_v)
    return per_key * sum(keys_per_layer(i) for i in range(shape.num_layers))


def decode_keys(shape: ModelShape, ctx: int):
    return lambda i: min(ctx, shape.sliding_window) if shape.is_sliding(i) else ctx


def prefill_keys(shape: ModelShape, ctx: int):
    """Mean over prompt positions p = 1..ctx of the keys position p sees: p, or at most the window."""
    def mean_keys(i: int) -> float:
        w = shape.sliding_window if shape.is_sliding(i) else ctx
        if ctx <= w:
            return (ctx + 1) / 2
        return (w * (w + 1) / 2 + (ctx - w) * w) / ctx
    return mean_keys


def prefill_flops(shape: ModelShape, tensors: list[WeightTensor], ctx: int) -> float:
    """FLOPs per token of a ctx-token prompt: every matmul once, attention over the mean key count."""
    return 2 * active_matmul_params(tensors, shape, False) + attention_flops(shape, prefill_keys(shape, ctx))


@dataclass(frozen=True, slots=True)
class Roofline:
    shape: ModelShape
    tensors: list[WeightTensor]
    device: Device
    kv: KVFormat
    block: int
    batch_tokens: int

    def decode_weight_bytes(self, concurrency: int) -> float:
        return decode_weight_bytes(self.tensors, self.shape, concurrency)

    def kv_read(self, ctx: int) -> float:
        return kv_bytes_read(self.shape, self.kv, self.block, ctx)

    def decode_flops(self, ctx: int) -> float:
        attention = attention_flops(self.shape, decode_keys(self.shape, ctx))
        return 2 * active_matmul_params(self.tensors, self.shape, True) + attention

    def decode_step_bytes(self, ctx: int, concurrency: int) -> float:
        return self.decode_weight_bytes(concurrency) + concurrency * self.kv_read(ctx)

    def decode_memory_bound(self, ctx: int, concurrency: int) -> float:
        """Tokens/s of all C sequences together if only memory traffic counted."""
        return concurrency * self.device.bandwidth / self.decode_step_bytes(ctx, concurrency)

    def decode_compute_bound(self, ctx: int) -> float:
        return self.device.peak_flops / self.decode_flops(ctx)

    def decode_tok_s(self, ctx: int, concurrency: int) -> float:
        return min(self.decode_memory_bound(ctx, concurrency), self.decode_compute_bound(ctx))

    def prefill_flops(self, ctx: int) -> float:
        return prefill_flops(self.shape, self.tensors, ctx)

    @property
    def prefill_peak(self) -> tuple[float, str]:
        """(ops a second, what they are) a prefill's matmuls run at: the CPU kernels' int8 dot products
        where every matrix is in a format they multiply (the GGUF block types), else dense bf16."""
        d = self.device
        int8 = d.int8_ops and all(int(t.qtype) in NATIVE_IDS for t in self.tensors
                                  if t.is_matrix and role(t, self.shape) != "embedding")
        return (d.int8_ops, "int8 dot products") if int8 else (d.peak_flops, "dense bf16")

    def prefill_compute_bound(self, ctx: int) -> float:
        return self.prefill_peak[0] / self.prefill_flops(ctx)

    def prefill_memory_bound(self, ctx: int) -> float:
        """A step of min(batch_tokens, ctx) prompt tokens reads every weight (all experts) once."""
        step = min(self.batch_tokens, ctx)
        all_weights = sum(t.n_bytes for t in self.tensors if role(t, self.shape) != "embedding")
        return step * self.device.bandwidth / all_weights

    def prefill_tok_s(self, ctx: int) -> float:
        return min(self.prefill_compute_bound(ctx), self.prefill_memory_bound(ctx))
