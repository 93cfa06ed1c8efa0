"""The native attention over quantized KV blocks (csrc/kv_quant.h, via hearth.kernels.attention
.paged_attention) against the torch reference (paged_attention_quantized_torch), for every codec, on
caches with scattered block tables: decode batches (partial last blocks, a token that completes its
block, a first token), a short chunk across a block boundary, a long chunk (torch path in the same
step), a window, a softcap, groups of 1 to 8 query heads, head_dim 64, 128, 256 and 512, and KVarN with and
without its f16 sink copy.

Tolerance: both paths decode the same blocks with the same f32 operations (bit-identical K and V)
and read the same f16 staging rows; they differ only in summation order, the exp polynomial (~2 ulp)
and, for KVarN, the rotations (a fast Walsh-Hadamard transform vs a matmul). With K/V of scale 2
(outputs up to ~8) they agree to ~1.5e-5 measured; stated as atol 5e-5, rtol 0 (a wrong key, block,
scale or mask moves outputs by ~1e-1). A long chunk's rows (NATIVE_MAX_Q or more new tokens) go to
SDPA in bf16 on the native path: BF16_ATOL there (tests/kernels/test_attention_quantized.py)."""

from __future__ import annotations

import pytest
import torch

from hearth.kernels import native
from hearth.kernels.attention import (NATIVE_MAX_Q, AttentionMetadata, paged_attention, paged_attention_quantized_torch,
                                     quantized_native_args)
from hearth.kvstore.codecs import QUANTIZED, get_codec
from hearth.kvstore.kvarn import hadamard
from hearth.kvstore.paged import QuantizedKVCache, StagingTable

pytestmark = pytest.mark.skipif(not native.has("kv_quant"), reason="the kernels here lack capability kv_quant "
                                "(quantized KV readers)")

ATOL = 5e-5
BF16_ATOL = 0.1


def step(name, kvh, d, seqs, g, forget_sinks=False):
    """seqs: (tokens cached before, new tokens this step) per sequence. Fills a cache with random K/V
    (one prefill step for what is cached), then writes this step's new tokens; blocks drawn at random.
    Returns the cache and this step's metadata."""
    codec = get_codec(name)
    bs = codec.block_size(None)
    nbs = [-(-(before + new) // bs) for before, new in seqs]
    num_blocks = sum(nbs) + 3
    perm = torch.randperm(num_blocks, generator=g).tolist()
    tables = [perm[sum(nbs[:i]):sum(nbs[:i + 1])] for i in range(len(seqs))]
    staging, cache = StagingTable(bs, 2, codec.sink), QuantizedKVCache(codec, num_blocks, bs, kvh, d, 2)

    def run(parts):  # parts: (request index, start, n)
        qsl = [0]
        for _, _, n in parts:
            qsl.append(qsl[-1] + n)
        plan = staging.plan([(f"r{i}", p, n, tables[i]) for i, p, n in parts], qsl)
        cache.write(torch.randn(qsl[-1], 2, kvh, d, generator=g) * 2, plan)
        return qsl, plan

    run([(i, 0, before) for i, (before, _) in enumerate(seqs) if before])
    if forget_sinks:  # evicted copies: first blocks are read from their encoded form
        for t in tables:
            staging.forget_sink(t[0])
    qsl, plan = run([(i, before, new) for i, (before, new) in enumerate(seqs)])
    meta = AttentionMetadata(qsl, [b + n for b, n in seqs], tables, torch.zeros(0, dtype=torch.long), bs)
    meta.kv_plan = plan
    return cache, meta


CASES = [  # heads, kv_heads, head_dim, (cached, new) per sequence, window, softcap
    (9, 3, 64, [(300, 1)], 0, 0.0),  # SmolLM2 decoding, a partial last block
    # a decode batch: block boundaries, a first token
    (9, 3, 64, [(130, 1), (127, 1), (0, 1), (63, 1), (200, 1)], 0, 0.0),
    (4, 1, 256, [(700, 1), (3, 20), (250, 9)], 512, 0.0),  # gemma3-270m, sliding window, short chunks across blocks
    (8, 2, 64, [(40, 1), (100, 2)], 0, 30.0),  # softcap
    (4, 4, 128, [(90, 1), (33, 2)], 0, 0.0),  # no grouping, head_dim 128
    (8, 1, 512, [(90, 1), (33, 2)], 0, 0.0),  # gemma4's global layers: head_dim 512
    (16, 2, 64, [(1000, 5)], 100, 0.0),  # group of 8, a window cut inside a block
    (6, 3, 64, [(10, NATIVE_MAX_Q + 3), (50, 1)], 0, 0.0),  # a long chunk takes the torch path in the same step
]


def case_id(c):
    return f"h{c[0]}kv{c[1]}d{c[2]}q{sum(n for _, n in c[3])}w{c[4]}c{c[5]:g}"


@pytest.mark.parametrize("name", list(QUANTIZED))
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_native_matches_torch(name, case):
    heads, kvh, d, seqs, window, softcap = case
    g = torch.Generator().manual_seed(d + sum(n for _, n in seqs))
    cache, meta = step(name, kvh, d, seqs, g)
    wide = torch.randn(meta.query_start_loc[-1], heads * d + 32, generator=g)
    q = wide[:, 32:].view(-1, heads, d)  # rows strided, as in the fused qkv output
    scale = d ** -0.5 * 3  # sharper than usual: a softmax far from uniform
    got = paged_attention(q, cache, meta, scale, window, softcap)
    want = paged_attention_quantized_torch(q, cache, meta, scale, window, softcap)
    long = torch.zeros(got.shape[0], dtype=torch.bool)
    for i, (_, n) in enumerate(seqs):
        long[meta.query_start_loc[i]:meta.query_start_loc[i] + n] = n >= NATIVE_MAX_Q
    torch.testing.assert_close(got[~long], want[~long], atol=ATOL, rtol=0)
    torch.testing.assert_close(got[long], want[long], atol=BF16_ATOL, rtol=0)


@pytest.mark.parametrize("name", list(QUANTIZED))
@pytest.mark.parametrize("d", [256, 512])
def test_the_kernel_takes_gemma4s_head_dims(name, d):
    """Both of gemma4's head dims (sliding 256, global 512) are attended natively, not left to torch (which
    would make a verify row differ from a decode row: speculation's row_regimes counts on the kernel)."""
    g = torch.Generator().manual_seed(d)
    cache, meta = step(name, 1, d, [(70, 1), (20, 2)], g)
    q = torch.randn(3, 8, d, generator=g)
    _, args = quantized_native_args(meta, cache.bs)
    out = torch.zeros_like(q)
    assert native.quantized_paged_attention(q, cache, *args, d ** -0.5, 0, 0.0, out)
    torch.testing.assert_close(out, paged_attention_quantized_torch(q, cache, meta, d ** -0.5), atol=ATOL, rtol=0)


@pytest.mark.parametrize("name", ["kvarn_k4v2", "kvarn_k4v4"])
def test_first_block_without_its_sink_copy(name):
    """When a first block's f16 copy was evicted, both paths read its encoded form."""
    g = torch.Generator().manual_seed(5)
    cache, meta = step(name, 1, 256, [(200, 1), (130, 3)], g, forget_sinks=True)
    assert all(s.sink_slot < 0 for s in meta.kv_plan.seqs)
    q = torch.randn(4, 4, 256, generator=g)
    torch.testing.assert_close(paged_attention(q, cache, meta, 0.2, 0, 0.0),
                               paged_attention_quantized_torch(q, cache, meta, 0.2, 0, 0.0), atol=ATOL, rtol=0)


def test_native_reads_the_encoded_blocks():
    """The kernel must read what is stored: zeroing the sealed blocks' codes changes its output."""
    g = torch.Generator().manual_seed(6)
    cache, meta = step("q8_0", 2, 64, [(100, 1)], g)
    q = torch.randn(1, 4, 64, generator=g)
    before = paged_attention(q, cache, meta, 0.3, 0, 0.0)
    cache.store["k"]["raw"].zero_()
    after = paged_attention(q, cache, meta, 0.3, 0, 0.0)
    assert (before - after).abs().max() > 1e-2
    torch.testing.assert_close(after, paged_attention_quantized_torch(q, cache, meta, 0.3, 0, 0.0), atol=ATOL, rtol=0)


@pytest.mark.parametrize("d", [32, 64, 128, 256, 512])
def test_hadamard_is_the_rotation_matrix(d):
    """native.hadamard (how write_kv_pair rotates KVarN's K/V) = x @ kvarn.hadamard(d), to f32 rounding
    (sums of d unit-scale terms: ~1e-6)."""
    y = torch.randn(5, 7 + 4 * d, generator=torch.Generator().manual_seed(d))
    x = y[:, 7:].view(5, 2, 2, d)  # rows strided, as in the fused qkv output
    torch.testing.assert_close(native.hadamard(x), x @ hadamard(d), atol=1e-5, rtol=0)


def test_hadamard_declines_other_dims():
    """Outside 32..512 native.hadamard says so (None) and the caller multiplies by the matrix."""
    assert native.hadamard(torch.randn(3, 2, 16)) is None


@pytest.mark.parametrize("name, d", [("q8_0", 64), ("kvarn_k4v2", 64), ("kvarn_k4v2", 16)])
def test_native_staging_write_equals_torch(name, d):
    """A decode step staged by the native kernels holds what the torch write stages: the same f16
    rounding (bit for bit without a rotation; within one f16 step where the rotations' f32 results
    straddle a rounding boundary). Head dim 16 (a tiny lfm2's): the rotation by the matrix (it raised)."""
    codec = get_codec(name)
    bs, g = codec.block_size(None), torch.Generator().manual_seed(7)
    caches = [QuantizedKVCache(codec, 4, bs, 2, d, 2) for _ in range(2)]
    plan = StagingTable(bs, 2, codec.sink).plan([("r", 5, 1, [2, 0])], [0, 1])
    kv = torch.randn(1, 2, 2, d, generator=g)
    caches[0].write(kv, plan)
    caches[1].write(kv, plan, native)
    got, want = caches[1].staging.float(), caches[0].staging.float()
    torch.testing.assert_close(got, want, atol=0, rtol=0 if codec.rotation(d) is None else 2 ** -10)
    assert got.abs().sum() > 0


@pytest.mark.parametrize("name", ["kvarn_k4v2", "kvarn_k4v4"])
@pytest.mark.parametrize("part", ["k", "v"])
def test_native_kvarn_encode_matches_torch(name, part):
    """native.kv_encode (how write_kv_pair seals KVarN blocks) against the codec's torch encode, on
    blocks with uneven channels and an outlier token. Same operations in the same order, stds in
    double: measured bit-identical; last-bit log/exp differences could tip a near-tied choice of
    balancing iterate in some tile, so the bound is 99% equal fields and the same reconstruction error
    within 1%."""
    q = getattr(get_codec(name), part)
    g = torch.Generator().manual_seed(8)
    x = (torch.randn(3, 64, 2, 128, generator=g) * (torch.rand(128, generator=g) * 3 + 0.1)).half().float()
    x[:, 5] *= 8
    want, got = q.encode(x), native.kv_encode(q, x)
    assert got.keys() == want.keys()
    for f in want:
        assert got[f].shape == want[f].shape and got[f].dtype == want[f].dtype
        assert (got[f] == want[f]).float().mean() >= 0.99, f
    err = [float((q.decode(e) - x).pow(2).mean()) for e in (got, want)]
    assert err[0] == pytest.approx(err[1], rel=0.01)
    assert native.kv_encode(get_codec("q8_0").k, x) is None  # other formats keep the torch encoder
