"""The C++ paged attention and KV write (hearth.kernels.native) against the torch reference
(hearth.kernels.attention.paged_attention_torch) on random caches with scattered block tables.

Tolerance: both read the same f16/bf16 keys and values exactly and accumulate in f32; they differ
only in summation order and the exp polynomial (~2 ulp), so outputs agree to ~1e-5 relative to
the values' scale. Stated as atol 2e-5 on values of unit scale. Long chunks (NATIVE_MAX_Q new tokens or
more) run in bf16 where the flash kernel runs (AMX bf16 tiles, or AVX512-BF16 without them), and in
SDPA in bf16 where the CPU has tiles and the kernel declines. Both round q, k, v (the kernel also the
probabilities) to 8 mantissa bits, ~4e-3 relative, and keep the scores in f32; the sharp softmax used
here amplifies that to <= ~0.035 on either path: 5e-2 there, a property of bf16 inputs, not of one CPU.
Without tiles SDPA runs in f32, the reference's own op (test_long_chunks_without_the_tile_kernel runs
both SDPA paths on any CPU)."""

from __future__ import annotations

import pytest
import torch

from hearth.kernels import native
from hearth.kernels.attention import NATIVE_MAX_Q, AttentionMetadata, paged_attention, paged_attention_torch, write_kv_pair

pytestmark = pytest.mark.skipif(not native.has("paged_attention"), reason="the kernels here lack capability "
                                "paged_attention")

ATOL = 2e-5
BF16_ATOL = 5e-2


def scattered_batch(q_lens, ctx_lens, bs, num_blocks, g):
    """Metadata for sequences with q_lens new tokens ending contexts of ctx_lens, each sequence's
    blocks drawn at random (no two sequences share one)."""
    perm = torch.randperm(num_blocks, generator=g).tolist()
    tables, qsl, slots = [], [0], []
    for n_q, ctx in zip(q_lens, ctx_lens):
        nb = -(-ctx // bs)
        tables.append(perm[:nb])
        perm = perm[nb:]
        qsl.append(qsl[-1] + n_q)
        slots += [tables[-1][p // bs] * bs + p % bs for p in range(ctx - n_q, ctx)]
    return AttentionMetadata(qsl, list(ctx_lens), tables, torch.tensor(slots, dtype=torch.long), bs)


CASES = [  # heads, kv_heads, head_dim, q_lens, ctx_lens, window, softcap
    (9, 3, 64, [1], [300], 0, 0.0),  # SmolLM2 decoding
    (9, 3, 64, [1, 1, 1, 1], [5, 40, 129, 1], 0, 0.0),  # a decode batch, a first token
    (4, 1, 256, [1, 3, 17], [700, 20, 17], 512, 0.0),  # gemma3-270m, a sliding window, a short chunk
    (8, 8, 128, [2, 1], [33, 64], 0, 50.0),  # no grouping, softcap
    (16, 2, 80, [5], [1000], 100, 0.0),  # head_dim 80, group of 8, window cut inside a block
    (32, 8, 128, [1, 2], [77, 300], 0, 0.0),  # Llama-3-8B's heads: a task covers 32 heads of 8 kv heads
    (6, 3, 64, [NATIVE_MAX_Q + 3, 1], [NATIVE_MAX_Q + 10, 50], 0, 0.0),  # a long chunk and a decode
    (9, 3, 64, [200, 77], [330, 77], 0, 0.0),  # long chunks after a cached prefix, and a whole prompt
    (4, 1, 256, [300], [900], 512, 0.0),  # gemma3's sliding window over a long chunk
    (8, 8, 128, [70], [70], 0, 50.0),  # softcap on a long chunk
    (4, 2, 80, [70], [90], 0, 0.0),  # head_dim 80: the tile kernel declines, SDPA in bf16 takes the chunk
    (8, 1, 512, [1, 4, 1], [300, 40, 1], 0, 0.0),  # gemma4's global head dim: decodes, a verify-sized chunk
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"h{c[0]}kv{c[1]}d{c[2]}q{sum(c[3])}w{c[5]}c{c[6]:g}")
def test_native_attention_matches_torch(case, dtype):
    heads, kvh, d, q_lens, ctx_lens, window, softcap = case
    g = torch.Generator().manual_seed(sum(q_lens) * 7 + d)
    bs, num_blocks = 16, 256
    meta = scattered_batch(q_lens, ctx_lens, bs, num_blocks, g)
    cache = torch.randn(2, num_blocks, bs, kvh, d, generator=g).to(dtype)
    wide = torch.randn(sum(q_lens), heads * d + 32, generator=g)
    q = wide[:, 32:].view(-1, heads, d)  # rows strided, as in the fused qkv output
    scale = d ** -0.5 * 3  # sharper than usual: a softmax far from uniform
    got = paged_attention(q, cache, meta, scale, window, softcap)
    want = paged_attention_torch(q, cache, AttentionMetadata(meta.query_start_loc, meta.seq_lens, meta.block_tables,
                                                             meta.slot_mapping, bs), scale, window, softcap)
    long = torch.zeros(got.shape[0], dtype=torch.bool)  # rows of chunks that take bf16 SDPA
    for i, n_q in enumerate(q_lens):
        q0 = meta.query_start_loc[i]
        long[q0:q0 + n_q] = n_q >= NATIVE_MAX_Q
    torch.testing.assert_close(got[~long], want[~long], atol=ATOL, rtol=0)
    bf16 = native.bf16_tiles() or (native.flash_prefill() and d % 32 == 0)  # the flash kernel's head dims
    torch.testing.assert_close(got[long], want[long], atol=BF16_ATOL if bf16 else ATOL, rtol=0)


@pytest.mark.parametrize("tiles", [False, True], ids=["no-tiles", "tiles"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("case", [c for c in CASES if max(c[3]) >= NATIVE_MAX_Q],
                         ids=lambda c: f"h{c[0]}kv{c[1]}d{c[2]}q{sum(c[3])}w{c[5]}c{c[6]:g}")
def test_long_chunks_without_the_tile_kernel(case, dtype, tiles, monkeypatch):
    """Long chunks the flash kernel does not take, on any CPU: SDPA in f32 where the CPU has no AMX bf16
    tiles (exact: the reference's op), in bf16 where it has them (the bf16 bound)."""
    monkeypatch.setattr(native, "prefill_attention", lambda *args: False)
    monkeypatch.setattr(native, "bf16_tiles", lambda: tiles)
    monkeypatch.setattr(native, "flash_prefill", lambda: False)
    test_native_attention_matches_torch(case, dtype)


def test_a_window_sees_exactly_its_keys():
    """Keys outside the window must get no weight: give them huge values and check they vanish."""
    bs, d = 4, 16
    meta = scattered_batch([1], [20], bs, 8, torch.Generator().manual_seed(0))
    cache = torch.zeros(2, 8, bs, 1, d, dtype=torch.float16)
    flat = cache.view(2, -1, 1, d)
    slots = meta.context_slots(0)
    flat[1, slots[:15]] = 1000.0  # positions 0..14: outside a window of 5 ending at 19
    flat[1, slots[15:]] = 1.0
    out = paged_attention(torch.randn(1, 1, d), cache, meta, 1.0, 5, 0.0)
    torch.testing.assert_close(out, torch.ones(1, 1, d))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_kv_write_rounds_like_torch(dtype):
    g = torch.Generator().manual_seed(3)
    kvh, d, bs = 3, 64, 16
    meta = scattered_batch([3, 1], [7, 30], bs, 32, g)
    cache = torch.zeros(2, 32, bs, kvh, d, dtype=dtype)
    wide = torch.randn(4, 2 * kvh * d + 8, generator=g) * 100
    kv = wide[:, 8:].view(4, 2, kvh, d)
    write_kv_pair(cache, kv, meta)
    flat = cache.view(2, -1, kvh, d)
    assert torch.equal(flat[:, meta.slot_mapping], kv.transpose(0, 1).to(dtype))
    untouched = torch.ones(flat.shape[1], dtype=torch.bool)
    untouched[meta.slot_mapping] = False
    assert not flat[:, untouched].any()


KERNEL_CASES = [  # heads, kv_heads, head_dim, new rows, context, window, softcap
    (6, 2, 64, 141, 299, 100, 0.0),  # after a cached prefix, rows not a multiple of 16, a window from mid-block
    (9, 3, 64, 77, 77, 0, 0.0),  # SmolLM2's heads, a whole prompt not a multiple of 16 or 32
    (12, 2, 128, 100, 133, 0, 0.0),  # Qwen2.5-1.5B's heads (group of 6), a prefix of 33
    (16, 1, 128, 48, 48, 0, 30.0),  # a group of 16 (a task's most), softcap
    (4, 1, 256, 70, 600, 64, 0.0),  # gemma3's head_dim 256, a window far shorter than the context
    (8, 8, 32, 33, 40, 0, 0.0),  # no grouping, head_dim 32
]


@pytest.mark.skipif(not native.flash_prefill(), reason="no flash prefill kernel (AMX or AVX512-BF16) at this CPU tier")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("case", KERNEL_CASES, ids=lambda c: f"h{c[0]}kv{c[1]}d{c[2]}q{c[3]}ctx{c[4]}w{c[5]}c{c[6]:g}")
def test_the_tile_kernel_takes_long_chunks(case, dtype):
    """The flash kernel itself (not the SDPA fallback) against SDPA in f32 (the reference) on q and
    caches exact in bf16: the kernel rounds only q * scale and its probabilities (max error 1.6-2.0e-2
    on Zen 4's AVX512-BF16 kernel)."""
    heads, kvh, d, n_q, ctx, window, softcap = case
    g = torch.Generator().manual_seed(3 + n_q + d)
    nb = -(-ctx // 16) + 8
    meta = scattered_batch([n_q], [ctx], 16, nb, g)
    cache = torch.randn(2, nb, 16, kvh, d, generator=g).to(torch.bfloat16).to(dtype)
    wide = torch.randn(n_q, heads * d + 16, generator=g).to(torch.bfloat16).float()
    q = wide[:, 16:].view(n_q, heads, d)  # rows strided, as in the fused qkv output
    out = torch.full_like(q, float("nan"))
    assert native.prefill_attention(q, cache, meta.table_tensor(0), ctx, d ** -0.5 * 3, window, softcap, out)
    want = paged_attention_torch(q, cache, meta, d ** -0.5 * 3, window, softcap)
    torch.testing.assert_close(out, want, atol=BF16_ATOL, rtol=0)


@pytest.mark.skipif(not native.flash_prefill(), reason="no flash prefill kernel (AMX or AVX512-BF16) at this CPU tier")
def test_the_tile_kernel_rescales_when_later_keys_score_far_higher():
    """The kernel's running max moves only when a row's scores pass it by more than 8 (then O^T and
    the sums are rescaled): keys that grow with their position make it move block after block.
    q * scale and the bf16 cache are exact in bf16, so only P's rounding separates it from torch."""
    heads, kvh, d, n_q, ctx, scale = 4, 1, 64, 200, 260, 0.25
    g = torch.Generator().manual_seed(5)
    meta = scattered_batch([n_q], [ctx], 16, 64, g)
    cache = torch.randn(2, 64, 16, kvh, d, generator=g)
    table = meta.table_tensor(0)
    for pos in range(ctx):
        cache[0, table[pos // 16], pos % 16] *= 1 + pos / 32
    cache = cache.to(torch.bfloat16)
    q = torch.randn(n_q, heads, d, generator=g).to(torch.bfloat16).float()
    keys = torch.stack([cache[0, table[p // 16], p % 16, 0].float() for p in range(ctx)])  # [ctx, d]
    scores = q[:, 0] @ keys.T * scale  # head 0, rows at positions ctx - n_q ..
    assert (scores[:, 32:].max(1).values - scores[:, :32].max(1).values > 8).float().mean() > 0.9
    out = torch.full_like(q, float("nan"))
    assert native.prefill_attention(q, cache, table, ctx, scale, 0, 0.0, out)
    want = paged_attention_torch(q, cache, meta, scale, 0, 0.0)
    torch.testing.assert_close(out, want, atol=1e-2, rtol=0)


@pytest.mark.skipif(not native.flash_prefill() or native.bf16_tiles(),
                    reason="no AVX512-BF16 flash kernel (AMX tiles do not split the scores)")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("d", [64, 128])
def test_precise_scores_survive_a_k_bias(d, dtype):
    """PRECISE_SCORES' layers (a k bias every key shares) on the AVX512-BF16 kernel: q and k split into
    bf16 high and low parts keep the scores near f32. With an f16 cache and a bias 20x the keys' own
    spread, the unsplit scores put outputs 0.14-0.19 off the f32 reference, the split ones <= 9e-3
    (P's rounding): the bound 2e-2 fails the former."""
    heads, kvh, n_q, ctx = 12, 2, 100, 133
    g = torch.Generator().manual_seed(7)
    nb = -(-ctx // 16) + 4
    meta = scattered_batch([n_q], [ctx], 16, nb, g)
    cache = torch.randn(2, nb, 16, kvh, d, generator=g)
    cache[0] += torch.randn(kvh, d, generator=g) * 20
    cache = cache.to(dtype)
    q = torch.randn(n_q, heads, d, generator=g) + 2
    out = torch.full_like(q, float("nan"))
    assert native.prefill_attention(q, cache, meta.table_tensor(0), ctx, d ** -0.5, 0, 0.0, out, True)
    want = paged_attention_torch(q, cache, meta, d ** -0.5, 0, 0.0)
    torch.testing.assert_close(out, want, atol=2e-2, rtol=0)
