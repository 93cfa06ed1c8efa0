"""Bidirectional attention of one sequence (every row sees every row: a vision tower's) on the native
flash prefill kernel (AMX bf16 tiles, or AVX512-BF16 without them), which is causal with a sliding window.
The trick: the keys stored twice, [K; K] (2N positions), and the N query rows placed at positions N .. 2N - 1
with a window of N keys: row i sees positions i + 1 .. N + i, which are keys i + 1 .. N - 1 of the first
copy and 0 .. i of the second, every key exactly once (a softmax does not care about their order).
Head dims the kernel does not take (not a multiple of 32: SigLIP-So400m's 72) are zero-padded to the next
multiple: zeros add nothing to q.k and give output columns that are dropped.
Numerics: q, k, v and the probabilities rounded to bf16, f32 sums (the kernel's; torch's bf16 SDPA rounds
the same inputs)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hearth.kernels import native

BLOCK = 32  # cache block rows: the kernel's key blocks


def full_attention_native(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor | None:
    """q, k, v: [N, heads, d] (any float dtype) -> f32 [N, heads, d], or None where the kernel does not run."""
    if not native.flash_prefill():
        return None
    n, heads, d = q.shape
    dp = -(-d // 32) * 32
    if dp > 256:
        return None
    if dp != d:
        q, k, v = (F.pad(t, (0, dp - d)) for t in (q, k, v))
    blocks = -(-2 * n // BLOCK)
    cache = torch.empty(2, blocks * BLOCK, heads, dp, dtype=torch.bfloat16)  # [K; K] and [V; V]
    cache[0, :n], cache[0, n:2 * n], cache[1, :n], cache[1, n:2 * n] = k, k, v, v
    out = torch.empty(n, heads, dp)
    table = torch.arange(blocks, dtype=torch.int64)
    if not native.prefill_attention(q.float().contiguous(), cache.view(2, blocks, BLOCK, heads, dp), table,
                                    2 * n, scale, n, 0.0, out):
        return None
    return out if dp == d else out[..., :d]
