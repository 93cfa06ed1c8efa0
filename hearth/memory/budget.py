"""Memory a configuration needs, and the largest context / concurrency that fit a device.

total(ctx, C) = weights as held + the KV cache hearth's engine allocates for C sequences of ctx
tokens (kv_cache.engine_pool: blocks of every layer, sliding ones too, and a quantized format's
f16 staging) + activations of one step + runtime (+ the tokenizer where host data shares the
device's memory). The same engine runs on CPUs and GPUs, so every device plans the same pool.
Every term grows with ctx and with C, so the limits are found by bisection on whole tokens /
whole sequences, with the same arithmetic that answers `fits`."""

from __future__ import annotations

from dataclasses import dataclass

from hearth.memory.devices import KINDS, Device
from hearth.memory.kv_cache import engine_pool
from hearth.memory.kv_formats import KVFormat
from hearth.memory.overhead import activation_bytes, tokenizer_bytes
from hearth.memory.shape import ModelShape

SEARCH_LIMIT = 1 << 31  # tokens or sequences: beyond any real context or batch


@dataclass(frozen=True, slots=True)
class Budget:
    shape: ModelShape
    weight_bytes: int
    """As the device's engine holds them (hearth.memory.layouts), not as the file stores them."""
    device: Device
    kv: KVFormat
    block: int
    batch_tokens: int

    def kv_reserved(self, ctx: int, concurrency: int) -> float:
        """hearth.llm with max_num_seqs=C, max_model_len=ctx and no memory bound on its pool."""
        return engine_pool(self.shape, self.kv, self.block, concurrency, ctx).bytes

    def activations(self, ctx: int, concurrency: int) -> int:
        return activation_bytes(self.shape, self.device.act_bytes, ctx, concurrency, self.batch_tokens)

    @property
    def tokenizer(self) -> int:
        """Counted only where host data shares the device's memory (CPU, unified memory)."""
        return tokenizer_bytes(self.shape) if KINDS[self.device.kind].holds_host_data else 0

    @property
    def fixed(self) -> float:
        """What does not depend on the workload: weights, runtime, tokenizer."""
        return self.weight_bytes + self.device.runtime + self.tokenizer

    def total(self, ctx: int, concurrency: int) -> float:
        return self.fixed + self.kv_reserved(ctx, concurrency) + self.activations(ctx, concurrency)

    def fits(self, ctx: int, concurrency: int) -> bool:
        return self.total(ctx, concurrency) <= self.device.usable_bytes

    def max_context(self, concurrency: int) -> int:
        """Longest context (tokens) C sequences can each hold; 0 if not even one token fits."""
        return _largest(lambda n: self.fits(n, concurrency))

    def max_concurrency(self, ctx: int) -> int:
        """Most sequences of ctx tokens at once; 0 if not even one fits."""
        return _largest(lambda n: self.fits(ctx, n))


def _largest(ok) -> int:
    """Largest n in [1, SEARCH_LIMIT] with ok(n), for ok true up to some n and false after; else 0."""
    if not ok(1):
        return 0
    lo, hi = 1, SEARCH_LIMIT
    if ok(hi):
        return hi
    while hi - lo > 1:  # invariant: ok(lo) and not ok(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo
