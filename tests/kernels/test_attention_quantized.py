"""paged_attention over a quantized KV cache against its slow twin: plain softmax attention, one
query at a time, over the K/V the cache reads back (rotated back to the model's space for KVarN) for
the blocks before the query's own, and the f16 K/V of its own block (the block being filled).
Decode (one and many sequences), prefill chunks, sliding window, softcap, sinks (gpt-oss: the torch path
only), grouped-query heads.

Tolerance: f32 against f32 up to summation order (rtol 1e-4, atol 1e-5), except where the native
kernels send a chunk of NATIVE_MAX_Q or more new tokens to SDPA in bf16 (q, k, v rounded to 8
mantissa bits, amplified by the sharp softmax used here): BF16_ATOL."""

from __future__ import annotations

import math

import pytest
import torch

from hearth.kernels import attention, native
from hearth.kernels.attention import (NATIVE_MAX_Q, AttentionMetadata, paged_attention,
                                      paged_attention_quantized_torch, write_kv_pair)
from hearth.kvstore.codecs import QUANTIZED, get_codec
from hearth.kvstore.paged import QuantizedKVCache, StagingTable

H, KVH, D = 4, 2, 64
BF16_ATOL = 0.1  # measured up to 0.06 (kvarn_k4v2 with softcap)


SINKS = torch.tensor([0.5, -1.0, 2.0, 4.0])  # [H]: one well above the scores, one below


def reference(q, stored, fresh, n_ctx, bs, scale, window, softcap, sinks=None):
    """q: [n_q, H, D] at the last n_q of n_ctx positions; stored, fresh: [2, >= n_ctx, KVH, D]; sinks: [H],
    one more logit per head in each softmax's denominator."""
    out = torch.empty_like(q)
    n_q = q.shape[0]
    for j in range(n_q):
        pos = n_ctx - n_q + j
        own = pos // bs * bs
        k = torch.cat([stored[0, :own], fresh[0, own:n_ctx]])
        v = torch.cat([stored[1, :own], fresh[1, own:n_ctx]])
        for h in range(H):
            kh = h // (H // KVH)
            s = (k[:n_ctx, kh] @ q[j, h]) * scale  # [n_ctx]
            if softcap:
                s = torch.tanh(s / softcap) * softcap
            t = torch.arange(n_ctx)
            seen = (t <= pos) & ((pos - t < window) if window else True)
            s = s.masked_fill(~seen, float("-inf"))
            p = torch.softmax(s, 0) if sinks is None else torch.softmax(torch.cat([s, sinks[h:h + 1]]), 0)[:-1]
            out[j, h] = p @ v[:n_ctx, kh]
    return out


def run_step(cache, table, seqs, kv_new, q, scale, window, softcap, attend=paged_attention, sinks=None):
    """seqs: (request id, start, n, block table); kv_new: [T, 2, KVH, D]; q: [T, H, D]."""
    qsl = [0]
    for _, _, n, _ in seqs:
        qsl.append(qsl[-1] + n)
    meta = AttentionMetadata(qsl, [p + n for _, p, n, _ in seqs], [t for *_, t in seqs], torch.zeros(0), cache.bs)
    meta.kv_plan = table.plan(seqs, qsl)
    write_kv_pair(cache, kv_new, meta)
    return attend(q, cache, meta, scale, window, softcap, **({} if sinks is None else {"sinks": sinks})), meta


def model_space(cache, meta, i):
    kv = cache.read(meta.kv_plan, i)
    return kv @ cache.rotation.T if cache.rotation is not None else kv


def f16(cache, kv):
    """[2, n, KVH, D]: what staging holds of kv [n, 2, KVH, D], in the model's space (write_kv_pair
    rotates by a fast Walsh-Hadamard transform when the native kernels run: the same rotation as the
    matmul up to f32 rounding, which the f16 staging can round either way)."""
    if cache.rotation is None:
        return kv.half().float().transpose(0, 1)
    rotated = native.hadamard(kv) if native.has("kv_quant") else kv @ cache.rotation
    return (rotated.half().float() @ cache.rotation.T).transpose(0, 1)


@pytest.mark.parametrize("name", list(QUANTIZED))
@pytest.mark.parametrize("window,softcap,sinks", [(0, 0.0, None), (40, 0.0, None), (0, 30.0, None), (0, 0.0, SINKS),
                                                 (40, 0.0, SINKS)], ids=["plain", "window", "softcap", "sinks",
                                                                          "window-sinks"])
def test_prefill_then_decode_matches_reference(name, window, softcap, sinks):
    codec = get_codec(name)
    bs = 64 if name.startswith("kvarn") else 16
    cache, table = QuantizedKVCache(codec, 8, bs, KVH, D, 4), StagingTable(bs, 4, codec.sink)
    g = torch.Generator().manual_seed(1)
    scale = 1 / math.sqrt(D)
    ctx_a, ctx_b = bs + 9, 2 * bs + 1
    kv_a, kv_b = torch.randn(ctx_a + 1, 2, KVH, D, generator=g), torch.randn(ctx_b + 1, 2, KVH, D, generator=g)
    q_a, q_b = torch.randn(ctx_a + 1, H, D, generator=g) * 3, torch.randn(ctx_b + 1, H, D, generator=g) * 3
    ta, tb = [1, 4], [0, 2, 6]
    # a mixed prefill step: a's prompt in two chunks, b's whole prompt
    run_step(cache, table, [("a", 0, 10, ta)], kv_a[:10], q_a[:10], scale, window, softcap, sinks=sinks)
    out, meta = run_step(cache, table, [("a", 10, ctx_a - 10, ta), ("b", 0, ctx_b, tb)],
                         torch.cat([kv_a[10:ctx_a], kv_b[:ctx_b]]), torch.cat([q_a[10:ctx_a], q_b[:ctx_b]]),
                         scale, window, softcap, sinks=sinks)
    fa, fb = f16(cache, kv_a), f16(cache, kv_b)
    for i, (q, fr, ctx) in enumerate([(q_a[10:ctx_a], fa, ctx_a), (q_b[:ctx_b], fb, ctx_b)]):
        kv = model_space(cache, meta, i)
        rows = out[meta.query_start_loc[i]:meta.query_start_loc[i + 1]]
        bf16 = native.has("kv_quant") and rows.shape[0] >= NATIVE_MAX_Q and sinks is None
        torch.testing.assert_close(rows, reference(q, kv, fr, ctx, bs, scale, window, softcap, sinks=sinks),
                                   rtol=0 if bf16 else 1e-4, atol=BF16_ATOL if bf16 else 1e-5)
    # a decode step of both (b's token seals nothing; a's is mid-block)
    out, meta = run_step(cache, table, [("a", ctx_a, 1, ta), ("b", ctx_b, 1, tb)],
                         torch.stack([kv_a[ctx_a], kv_b[ctx_b]]), torch.stack([q_a[ctx_a], q_b[ctx_b]]),
                         scale, window, softcap, sinks=sinks)
    for i, (q, fr, ctx) in enumerate([(q_a[ctx_a:], fa, ctx_a + 1), (q_b[ctx_b:], fb, ctx_b + 1)]):
        kv = model_space(cache, meta, i)
        torch.testing.assert_close(out[i:i + 1], reference(q, kv, fr, ctx, bs, scale, window, softcap, sinks=sinks),
                                   rtol=1e-4, atol=1e-5)
    # a lone decode
    out, meta = run_step(cache, table, [("b", ctx_b + 1, 1, tb)], kv_b[-1:], q_b[-1:], scale, window, softcap,
                         sinks=sinks)
    kv = model_space(cache, meta, 0)
    fb = torch.cat([fb, f16(cache, kv_b[-1:])], 1)  # the same K/V row written again, at position ctx_b + 1
    torch.testing.assert_close(out, reference(q_b[-1:], kv, fb, ctx_b + 2, bs, scale, window, softcap, sinks=sinks),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("span", [attention.QUANTIZED_SPAN, 7])
@pytest.mark.parametrize("name", ["q4_0", "kvarn_k4v2"])
def test_prefill_equals_token_by_token_decode(name, span, monkeypatch):
    """Every token sees the same K/V whether its sequence is prefilled at once, in chunks, or decoded
    one token at a time (the block being filled is f16 in all three), so the outputs agree (in f32:
    the torch twin; span 7 splits long chunks mid-block into many SDPA calls)."""
    monkeypatch.setattr(attention, "QUANTIZED_SPAN", span)
    codec = get_codec(name)
    bs = 64 if name.startswith("kvarn") else 16
    n, scale = 2 * bs + 7, 1 / math.sqrt(D)
    g = torch.Generator().manual_seed(2)
    kv, q = torch.randn(n, 2, KVH, D, generator=g), torch.randn(n, H, D, generator=g) * 3
    outs = []
    for chunks in ([n], [5, bs, n - bs - 5], [1] * n):
        cache, table = QuantizedKVCache(codec, 4, bs, KVH, D, 2), StagingTable(bs, 2, codec.sink)
        p, rows = 0, []
        for c in chunks:
            out, _ = run_step(cache, table, [("s", p, c, [3, 0, 2])], kv[p:p + c], q[p:p + c], scale, 0, 0.0,
                              paged_attention_quantized_torch)
            rows.append(out)
            p += c
        outs.append(torch.cat(rows))
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(outs[2], outs[0], rtol=1e-4, atol=1e-5)
