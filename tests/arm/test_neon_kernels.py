"""The neon tier's kernel library (csrc/gguf_kernels_neon.cpp) on this machine: cross-compiled for
aarch64, run under qemu-user through tests/arm/neon_driver.cpp (tests/arm/qemu.py), in the builds a
CPU can get (plain NEON, and with the int8 dot-product instructions: BUILDS). Every entry point against the
references the x86 tiers' tests use, with their tolerances:

- GEMV per block type: the exact twin (gguf-py's dequantization, an f64 matmul) within the 8-bit
  activation bound (tests/kernels/test_native.py), and the avx2 library's GEMV (same activation bytes,
  same integer dots: only the f32 sum order differs) within 1e-5 of sum(blockmax|x| |W|), as
  tests/kernels/test_native_avx2.py holds avx2 to avx512; row lookup and bf16 expansion bit-exact;
- paged attention (causal, sliding window, soft-cap, grouped heads, token trees): the torch twin,
  atol 2e-5 (tests/kernels/test_native_attention.py, test_tree_attention.py), and with row groups on
  and off bit for bit (test_attention_rows.py); KV write: torch's casts;
- q/k norm + rope: its torch twin; the fused decoder layer, and the stack with LoRA terms: the avx2
  library's, on the same inputs.

Skipped, naming the tool, where the cross compiler or qemu-user is missing (`make test-arm` installs them)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from hearth.kernels import native, tiers
from hearth.kernels.attention import NATIVE_MAX_Q, AttentionMetadata, paged_attention_torch
from hearth.layers.quant import as_bytes
from tests.arm import qemu
from tests.kernels.test_native import assert_act8_close, block_max, widths
from tests.kernels.test_attention_rows import CASES as ROW_CASES
from tests.kernels.test_native_attention import CASES as ATTENTION_CASES
from tests.kernels.test_native_attention import scattered_batch
from tests.kernels.test_tree_attention import CASES as TREE_CASES
from tests.kernels.test_tree_attention import PARENTS, fresh, tree_meta
from tests.layers.test_quant import E8M0_FIELDS, EXTREME_E8M0, native_quants, gguf_reference, random_tensor

QUANTS = native_quants("neon")
pytestmark = pytest.mark.skipif(qemu.missing_tool() is not None,
                                reason=f"the neon tier's cross-test needs {qemu.missing_tool()} (make test-arm installs it)")
AVX2 = tiers.why_not("avx2")
KV = {"f16": torch.float16, "bf16": torch.bfloat16}


BUILDS = os.environ.get("HEARTH_NEON_BUILDS", "plain").split()
"""The builds tested: `make test` the plain one (every aarch64 CPU's code but the dot product), `make
test-arm` both (HEARTH_NEON_BUILDS="plain dotprod"): each build is ~20 s of CPU with its cross-compile,
~10 s once cached (2026-12-04, 2 vCPUs)."""
assert set(BUILDS) <= set(qemu.VARIANTS), f"HEARTH_NEON_BUILDS: builds are {', '.join(qemu.VARIANTS)}"


@pytest.fixture(scope="module", params=BUILDS)
def neon(request, tmp_path_factory):
    """(library, driver, a fresh script folder each call) for one build."""
    lib = qemu.build_library(request.param)
    driver = qemu.build_driver(lib.parent)
    folder = tmp_path_factory.mktemp(f"neon-{request.param}")
    count = iter(range(1 << 30))
    return request.param, lambda: qemu.Script(folder / str(next(count))), \
        lambda s, cpu=qemu.CPUS[request.param]: s.run(lib, driver, cpu)


def test_the_library_loads_as_native_py_loads_it(neon):
    variant, script, run = neon
    s = script()
    calls = [s.call("hk_abi_version"), s.call("hk_cpu_ok"), s.call("hk_set_tier", tiers.BY_NAME["neon"].level),
             s.call("hk_set_tier", tiers.BY_NAME["avx512"].level), s.call("hk_neon_dotprod")]
    names = sorted(set().union(*(native.CAPABILITIES[c] for c in native.NEON_LIBRARY.provides)))
    for name in names:
        s.has(name)
    run(s)
    assert [s.result(c) for c in calls] == [native.ABI_VERSION, 1, 0, -1, int(variant == "dotprod")]
    assert {n: s.results[n] for n in names} == {n: "1" for n in names}
    older = script()  # a CPU without the dot-product instructions: only the plain build may run there
    ok = older.call("hk_cpu_ok")
    run(older, qemu.CPUS["plain"])
    assert older.result(ok) == int(variant == "plain")


def test_the_roofline_passes(neon):
    """csrc/peaks.h on NEON: the read pass reads every byte once (tests/kernels/test_peaks.py), the dot
    pass counts 12 chains x 4 dots x 16 products a round per thread (sdot, or the widening multiplies)."""
    _, script, run = neon
    s = script()
    buf = torch.randint(0, 256, (64 * 1013,), dtype=torch.uint8, generator=torch.Generator().manual_seed(3))
    reads = {streams: s.call("hk_read_pass", s.tensor(buf), buf.numel(), streams) for streams in (1, 4)}
    dots = s.call("hk_int8_dot_pass", 100)
    run(s)  # 2 threads
    want = int(np.bitwise_xor.reduce(buf.numpy().view(np.uint64)))
    assert {k: s.result(r) % 2**64 for k, r in reads.items()} == {1: want, 4: want}
    assert s.result(dots) == 100 * 2 * 12 * 4 * 16


def _plan(s: qemu.Script, parts: list, k: int) -> str:
    """hk_plan_new over GGUFTensors `parts` (side by side), as NativeMatmul builds it."""
    data = [as_bytes(t.data, t.qtype) for t in parts]
    return s.call("hk_plan_new", len(parts), s.pointers(*[s.tensor(d) for d in data]),
                  s.tensor(torch.tensor([int(t.qtype) for t in parts], dtype=torch.int32)),
                  s.tensor(torch.tensor([d.shape[0] for d in data])), s.tensor(torch.tensor([d.shape[1] for d in data])),
                  k, 0)


@pytest.mark.parametrize("qtype", QUANTS, ids=lambda q: q.name)
def test_gemv_and_dequant_against_exact_twin_and_the_avx2_library(neon, qtype):
    _, script, run = neon
    rng, g = np.random.default_rng(int(qtype) + 7), torch.Generator().manual_seed(int(qtype))
    s, cases = script(), []
    for k in widths(qtype):
        for n in (37, 163):  # one run of rows, and four interleaved runs with a short last one
            t = random_tensor(qtype, n, k, rng)
            plan = _plan(s, [t], k)
            x = torch.randn(9, k, generator=g) * torch.rand(9, 1, generator=g) * 10
            outs = {}
            for m in (1, 2, 4, 5, 9):  # register tiles of 4 rows and each tail
                outs[m] = s.output(torch.zeros(m, n))
                s.call("hk_linear", plan, s.tensor(x[:m]), 0, m, k, None, 0.0, None, outs[m], n)
            ids = torch.tensor([n - 1, 0, 5, 5])
            rows, bf16 = s.output(torch.zeros(4, k)), s.output(torch.zeros(n - 3, k, dtype=torch.bfloat16))
            wb = as_bytes(t.data, qtype)  # uint8 [n, row_bytes]
            w_ref = s.tensor(wb)
            rc = [s.call("hk_dequant_rows", w_ref, int(qtype), wb.shape[1], k, n, s.tensor(ids), 4, rows),
                  s.call("hk_dequant_bf16", w_ref, int(qtype), wb.shape[1], k, 2, n - 1, bf16)]
            cases.append((t, k, x, outs, ids, rows, bf16, rc))
    run(s)
    avx2 = None if AVX2 else native.open_tier("avx2")
    for t, k, x, outs, ids, rows, bf16, rc in cases:
        w = torch.from_numpy(gguf_reference(t))
        assert [s.result(r) for r in rc] == [0, 0]
        assert torch.equal(s.read(rows), w[ids]) and torch.equal(s.read(bf16), w[2:-1].to(torch.bfloat16))
        mm2 = native.NativeMatmul([(as_bytes(t.data, t.qtype), int(t.qtype))], k, so=avx2) if avx2 else None
        for m, ref in outs.items():
            y = s.read(ref)
            assert_act8_close(y, x[:m], w)
            if mm2 is not None:
                bound = 1e-5 * (block_max(x[:m]).double() @ w.abs().double().T) + 1e-7
                assert bool(((y.double() - mm2(x[:m]).double()).abs() <= bound).all()), (k, m)



def test_mxfp4_dequant_bit_exact_at_extreme_scales(neon):
    """MXFP4's E8M0 scales at their ends (2^-128 and 2^-127 are f32 subnormals, 2^127 x 12 overflows) under
    random codes: row lookup bit-exact, as tests/kernels/test_native.py holds the x86 tiers."""
    _, script, run = neon
    t = random_tensor(Q.MXFP4, 14, 512, np.random.default_rng(29))
    blocks = t.data.reshape(-1, 17)
    blocks[:, E8M0_FIELDS[Q.MXFP4]] = np.resize(np.array(EXTREME_E8M0, dtype=np.uint8), blocks.shape[0])
    wb, s = as_bytes(t.data, Q.MXFP4), script()
    rows = s.output(torch.zeros(14, 512))
    rc = s.call("hk_dequant_rows", s.tensor(wb), int(Q.MXFP4), wb.shape[1], 512, 14, s.tensor(torch.arange(14)), 14, rows)
    run(s)
    assert s.result(rc) == 0
    assert np.array_equal(s.read(rows).numpy().view(np.uint32), gguf_reference(t).view(np.uint32))

def _attention(s: qemu.Script, q: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata, scale: float,
               window: int, softcap: float) -> tuple[str, str]:
    """hk_paged_attention over every sequence of meta, as native.paged_attention calls it -> (rc, out)."""
    _, nb, bs, kvh, d = cache.shape
    q_start, q_len, seq_lens, tables = meta.native_split()[1]
    tree = meta.tree_rows()
    out = s.output(torch.zeros(q.shape))
    rc = s.call("hk_paged_attention", s.tensor(q), q.shape[1] * d, s.tensor(cache), int(cache.dtype == torch.bfloat16),
                nb * bs, bs, q.shape[1], kvh, d, q_start.shape[0], s.tensor(q_start), s.tensor(q_len),
                s.tensor(seq_lens), s.tensor(tables), tables.shape[1], scale, window, softcap, out, q.shape[1] * d,
                None if tree is None else s.tensor(tree), 0 if tree is None else tree.shape[1])
    return rc, out


@pytest.mark.parametrize("dtype", list(KV), ids=list(KV))
def test_paged_attention_matches_torch(neon, dtype):
    """The decode and short-chunk cases of the x86 kernels' test (the long chunks there go to SDPA,
    not to this kernel): causal, sliding windows cut inside a block, soft-cap, groups of 1 to 8."""
    _, script, run = neon
    s, cases = script(), []
    for case in ATTENTION_CASES:
        heads, kvh, d, q_lens, ctx_lens, window, softcap = case
        if max(q_lens) >= NATIVE_MAX_Q:
            continue
        g = torch.Generator().manual_seed(sum(q_lens) * 7 + d)
        meta = scattered_batch(q_lens, ctx_lens, 16, 256, g)
        cache = torch.randn(2, 256, 16, kvh, d, generator=g).to(KV[dtype])
        q = torch.randn(sum(q_lens), heads, d, generator=g)
        scale = d ** -0.5 * 3  # sharper than usual: a softmax far from uniform
        want = paged_attention_torch(q, cache, meta, scale, window, softcap)
        cases.append((case, want, *_attention(s, q, cache, meta, scale, window, softcap)))
    run(s)
    for case, want, rc, out in cases:
        assert s.result(rc) == 0, case
        torch.testing.assert_close(s.read(out), want, atol=2e-5, rtol=0, msg=lambda m: f"{case}: {m}")


@pytest.mark.parametrize("dtype", list(KV), ids=list(KV))
def test_tree_rows_match_torch(neon, dtype):
    """A token tree's node rows attend to the keys before the tree and their ancestors only (the
    kernel's remap of the row's path slots), beside an ordinary decoding sequence."""
    _, script, run = neon
    s, cases = script(), []
    for case in TREE_CASES:
        heads, kvh, d, base, window, softcap, bs = case
        g = torch.Generator().manual_seed(base + d)
        meta = tree_meta(base, PARENTS, bs, g)
        cache = torch.randn(2, 512, bs, kvh, d, generator=g).to(KV[dtype])
        q = torch.randn(meta.query_start_loc[-1], heads, d, generator=g)
        scale = d ** -0.5 * 3
        want = paged_attention_torch(q, cache, fresh(meta), scale, window, softcap)
        cases.append((case, want, *_attention(s, q, cache, meta, scale, window, softcap)))
    run(s)
    for case, want, rc, out in cases:
        assert s.result(rc) == 0, case
        torch.testing.assert_close(s.read(out), want, atol=2e-5, rtol=0, msg=lambda m: f"{case}: {m}")


@pytest.mark.parametrize("dtype", list(KV), ids=list(KV))
def test_row_groups_keep_each_rows_bits(neon, dtype):
    """Row groups (csrc/attention_rows.h over attention_pages.h's RowOps on vf8): chains beside decode
    rows, a window, soft-cap with blocks of 4, and a tree with its sequence's ordinary row give the same
    bits with groups on (the default) and off (hk_set_row_groups(0): every task alone)."""
    _, script, run = neon
    s, cases = script(), []
    for case in ROW_CASES[1:4]:  # the small ones: seconds under qemu
        heads, kvh, d, q_lens, ctx_lens, window, softcap, bs = case
        g = torch.Generator().manual_seed(sum(ctx_lens) + d)
        nb = sum(-(-c // bs) for c in ctx_lens) + 8
        cases.append((case, scattered_batch(q_lens, ctx_lens, bs, nb, g),
                      torch.randn(2, nb, bs, kvh, d, generator=g) * 2, torch.randn(sum(q_lens), heads, d, generator=g),
                      window, softcap))
    g = torch.Generator().manual_seed(110)
    tree = tree_meta(110, PARENTS, 16, g, others=2)
    cases.append(("tree", tree, torch.randn(2, 512, 16, 2, 128, generator=g) * 2,
                  torch.randn(tree.query_start_loc[-1], 12, 128, generator=g), 0, 0.0))
    calls = []
    for case, meta, cache, q, window, softcap in cases:
        cache, scale = cache.to(KV[dtype]), q.shape[-1] ** -0.5 * 3
        on = _attention(s, q, cache, meta, scale, window, softcap)
        s.call("hk_set_row_groups", 0)
        off = _attention(s, q, cache, fresh(meta), scale, window, softcap)
        s.call("hk_set_row_groups", 1)
        calls.append((case, paged_attention_torch(q, cache, fresh(meta), scale, window, softcap), on, off))
    run(s)
    for case, want, (rc_on, on), (rc_off, off) in calls:
        assert (s.result(rc_on), s.result(rc_off)) == (0, 0), case
        assert torch.equal(s.read(on), s.read(off)), f"{case}: row groups change the bits"
        torch.testing.assert_close(s.read(on), want, atol=2e-5, rtol=0, msg=lambda m: f"{case}: {m}")


def test_kv_write_rounds_like_torch(neon):
    """f32 K|V rows into scattered slots of f16 and bf16 caches; a width that is no multiple of 8 (the
    scalar tail); large values (rounding near the top of f16's range)."""
    _, script, run = neon
    s, cases = script(), []
    for dtype in KV.values():
        for kvh, d in ((3, 64), (1, 12)):
            g = torch.Generator().manual_seed(kvh * d)
            meta = scattered_batch([3, 1], [7, 30], 16, 32, g)
            cache = torch.zeros(2, 32, 16, kvh, d, dtype=dtype)
            kv = torch.randn(4, 2 * kvh * d, generator=g) * 100
            out = s.output(cache)
            s.call("hk_kv_write", s.tensor(kv), kv.shape[1], 4, s.tensor(meta.slot_mapping), out,
                   int(dtype == torch.bfloat16), 32 * 16, kvh * d)
            want = cache.clone()
            want.view(2, -1, kvh, d)[:, meta.slot_mapping] = kv.view(4, 2, kvh, d).transpose(0, 1).to(dtype)
            cases.append((out, want))
    run(s)
    for out, want in cases:
        assert torch.equal(s.read(out), want)


def _rope_twin(qk, rot, cos, sin, neox, norm, eps):
    """hk_qk_rope in torch: per-head RMSNorm, then (a, b) -> (a c - b s, b c + a s) on halves or pairs."""
    x = qk.double()
    if norm is not None:
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * norm.double()
    h = rot // 2
    ia = torch.arange(h) if neox else torch.arange(h) * 2
    ib = ia + h if neox else ia + 1
    a, b = x[..., ia], x[..., ib]
    c, s = cos.double()[:, None], sin.double()[:, None]
    x[..., ia], x[..., ib] = a * c - b * s, b * c + a * s
    return x.float()


def test_qk_norm_and_rope_match_torch(neon):
    _, script, run = neon
    s, cases = script(), []
    g = torch.Generator().manual_seed(4)
    for neox, with_norm, rot in ((False, False, 64), (True, True, 64), (True, False, 32)):
        qk = torch.randn(3, 5, 64, generator=g)
        cos, sin = torch.rand(3, rot // 2, generator=g), torch.rand(3, rot // 2, generator=g)
        norm = torch.rand(5, 64, generator=g) + 0.5 if with_norm else None
        out = s.output(qk)
        s.call("hk_qk_rope", out, 3, 5 * 64, 5, 64, rot, None if norm is None else s.tensor(norm), 1e-6,
               s.tensor(cos), s.tensor(sin), int(neox))
        cases.append((out, _rope_twin(qk, rot, cos, sin, neox, norm, 1e-6)))
    run(s)
    for out, want in cases:
        torch.testing.assert_close(s.read(out), want, atol=1e-5, rtol=1e-5)


LAYERS = {  # hidden, heads, kv heads, head_dim, inter, activation, neox, norms present, weight types
    "qwen2-like": (256, 4, 2, 64, 512, "silu", False, ("attn", "bias", "ffn"), (Q.Q4_K, Q.Q6_K, Q.Q4_0, Q.Q5_K)),
    "gemma3-like": (256, 4, 1, 64, 256, "gelu_tanh", True, ("attn", "qk", "post_attn", "ffn", "post_ffn"),
                    (Q.Q8_0, Q.Q5_0, Q.Q4_1, Q.Q2_K)),
}
NORMS = ("attn", "bias", "qk", "post_attn", "ffn", "post_ffn")  # hk_layer_new's norms[6]


def _layer_inputs(name: str):
    hidden, heads, kvh, d, inter, act, neox, present, types = LAYERS[name]
    rng, g = np.random.default_rng(11), torch.Generator().manual_seed(11)
    shapes = [((heads + 2 * kvh) * d, hidden), (hidden, heads * d), (2 * inter, hidden), (hidden, inter)]
    weights = [random_tensor(q, n, k, rng, scale=0.002) for q, (n, k) in zip(types, shapes)]
    sizes = {"attn": hidden, "bias": (heads + 2 * kvh) * d, "qk": (heads + kvh) * d, "post_attn": hidden,
             "ffn": hidden, "post_ffn": hidden}
    norms = [torch.rand(sizes[n], generator=g) + 0.5 if n in present else None for n in NORMS]
    meta = scattered_batch([1, 2], [40, 20], 16, 16, g)  # a decode row and a 2-row verify
    cache = torch.randn(2, 16, 16, kvh, d, generator=g).to(torch.float16)
    x = torch.randn(3, hidden, generator=g) * 2
    cos, sin = torch.rand(3, d // 2, generator=g), torch.rand(3, d // 2, generator=g)
    head = [torch.tensor([1e-6, 1e-6, 1e-5, 1e-6, 1e-5], dtype=torch.float32), native.ACTIVATIONS[act], int(neox),
            heads, kvh, d, d, 0, d ** -0.5, 0.0]  # eps[5], act, neox, heads, kvh, d, rot, window, scale, softcap
    return weights, norms, head, meta, cache, x, cos, sin


def _avx2_built_layer(fns: tuple[str, ...], weights, norms, head):
    """(the avx2 library here with hk_layer_new/free and `fns` declared as fused_layer declares them, a layer of
    `weights` in it, its plans: kept alive as long as the layer)."""
    from hearth.kernels.fused_layer import LAYER_SIGNATURES

    so = native.open_tier("avx2")
    for fn in ("hk_layer_new", "hk_layer_free", *fns):
        getattr(so, fn).restype, getattr(so, fn).argtypes = LAYER_SIGNATURES[fn]
    mms = [native.NativeMatmul([(as_bytes(t.data, t.qtype), int(t.qtype))], t.shape[1], so=so) for t in weights]
    ptrs = (native.ctypes.c_void_p * 6)(*[None if t is None else t.data_ptr() for t in norms])
    eps = (native.ctypes.c_float * 5)(*head[0].tolist())
    return so, so.hk_layer_new(*(m.plan for m in mms), ptrs, eps, *head[1:]), mms


def _avx2_layer(weights, norms, head, meta, cache, x, cos, sin):
    """The same layer through the avx2 library here (ctypes, as fused_layer.FusedLayer calls it)."""
    from hearth.kernels.fused_layer import step_args

    so, layer, mms = _avx2_built_layer(("hk_layer_forward",), weights, norms, head)
    rc = so.hk_layer_forward(layer, x.data_ptr(), x.shape[0], cos.data_ptr(), sin.data_ptr(), cache.data_ptr(),
                             *step_args(cache, meta))
    so.hk_layer_free(layer)
    assert rc == 0
    return x, cache


def _rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.double()


def _layer_twin(name, weights, norms, head, meta, cache, x, cos, sin) -> torch.Tensor:
    """hk_layer_forward in torch, f64 with the exact weights (gguf-py's dequantization): x after the layer."""
    hidden, heads, kvh, d, inter, act, neox, _, _ = LAYERS[name]
    w = [torch.from_numpy(gguf_reference(t)).double() for t in weights]
    attn, bias, qk, post_attn, ffn, post_ffn = norms
    eps = head[0].tolist()
    x = x.double()
    y = _rms(x, attn, eps[0]) @ w[0].T + (0 if bias is None else bias.double())
    nq, nk = heads * d, kvh * d
    qkh = y[:, :nq + nk].reshape(-1, heads + kvh, d)
    qkh = _rope_twin(qkh if qk is None else _rms(qkh, qk.view(heads + kvh, d), eps[1]), d, cos, sin, neox, None, 0)
    cache = cache.clone()
    flat = cache.view(2, -1, kvh, d)
    flat[0, meta.slot_mapping], flat[1, meta.slot_mapping] = qkh[:, heads:].to(cache.dtype), \
        y[:, nq + nk:].reshape(-1, kvh, d).to(cache.dtype)
    att = paged_attention_torch(qkh[:, :heads].contiguous(), cache, meta, head[8], 0, 0.0).double().reshape(-1, nq)
    o = att @ w[1].T
    x = x + (o if post_attn is None else _rms(o, post_attn, eps[2]))
    g = _rms(x, ffn, eps[3]) @ w[2].T
    a = torch.nn.functional.silu(g[:, :inter]) if act == "silu" else torch.nn.functional.gelu(g[:, :inter], approximate="tanh")
    o = (a * g[:, inter:]) @ w[3].T
    return (x + (o if post_ffn is None else _rms(o, post_ffn, eps[4]))).float()


@pytest.mark.skipif(AVX2 is not None, reason=f"the fused layer is compared with the avx2 tier's, which {AVX2}")
@pytest.mark.parametrize("name", list(LAYERS))
def test_fused_layer_matches_the_avx2_layer(neon, name):
    """hk_layer_forward (norm, q|k|v, q/k norm and rope, KV write, attention, output projection, MLP and
    their residual adds) against its f64 torch twin: the 8-bit activations of its four linears move
    the result by ~1% of what the layer adds (avx2's layer: 0.85-1.0% on these inputs), held to 3%.
    And against the avx2 library's layer: the same 8-bit activation bytes and integer dots, f32
    sums in another order (~1e-7 relative), which can move an activation across a rounding edge of
    its 8-bit code (d / 127 of its block's max): held to 1e-4 of the stream's scale."""
    _, script, run = neon
    weights, norms, head, meta, cache, x, cos, sin = _layer_inputs(name)
    s = script()
    plans = [_plan(s, [t], t.shape[1]) for t in weights]
    layer = s.call("hk_layer_new", *plans, s.pointers(*[None if t is None else s.tensor(t) for t in norms]),
                   s.tensor(head[0]), *head[1:])
    q_start, q_len, seq_lens, tables = meta.native_split()[1]
    x_out, kv_out = s.output(x), s.output(cache)
    rc = s.call("hk_layer_forward", layer, x_out, 3, s.tensor(cos), s.tensor(sin), kv_out, 0, 16 * 16, 16,
                s.tensor(meta.slot_mapping), 2, s.tensor(q_start), s.tensor(q_len), s.tensor(seq_lens),
                s.tensor(tables), tables.shape[1], None, 0)
    run(s)
    assert s.results[layer[1:]] == "ptr" and s.result(rc) == 0
    twin = _layer_twin(name, weights, norms, head, meta, cache, x, cos, sin)
    delta = float((twin - x).abs().max())  # what the layer adds to the stream
    assert float((s.read(x_out) - twin).abs().max()) <= 0.03 * delta
    want_x, want_kv = _avx2_layer(weights, norms, head, meta, cache.clone(), x.clone(), cos, sin)
    assert not torch.equal(want_x, x)  # the layer ran
    torch.testing.assert_close(s.read(x_out), want_x, atol=1e-4 * float(want_x.abs().max()), rtol=0)
    torch.testing.assert_close(s.read(kv_out).float(), want_kv.float(), atol=2e-3, rtol=2e-3)


def _lora_inputs(name: str):
    """A layer's LoRA terms as hk_lora_new takes them (hearth.layers.lora.LoraLinear's tensors): rank 4
    on q and on v (adapters 0 and 1), rank 8 on o, up (within gate|up) and down; and the step's scales
    [3 rows, 2 adapters]: the decode row with both adapters on, the 2-row verify with none."""
    hidden, heads, kvh, d, inter, *_ = LAYERS[name]
    g = torch.Generator().manual_seed(12)
    nq, nk = heads * d, kvh * d
    linears = [(hidden, nq + 2 * nk, [(0, 4, 0, nq, 0.5), (1, 4, nq + nk, nk, 2.0)]),
               (nq, hidden, [(0, 8, 0, hidden, 1.0)]), (hidden, 2 * inter, [(1, 8, inter, inter, 0.25)]),
               (inter, hidden, [(0, 8, 0, hidden, 1.0)])]
    parts = []
    for k, n, terms in linears:
        ranks = sum(t[1] for t in terms)
        a_t, b_t = torch.randn(k, ranks, generator=g) / k ** 0.5, torch.zeros(ranks, n)
        adapter, factor, spans, c = [], [], [], 0
        for j, r, start, width, f in terms:
            b_t[c:c + r, start:start + width] = torch.randn(r, width, generator=g) * 0.05
            adapter += [j] * r
            factor += [f] * r
            spans.append([c, r, start, width])
            c += r
        parts.append((a_t, b_t, torch.tensor(adapter), torch.tensor(factor), torch.tensor(spans)))
    scales = torch.tensor([[1.0, 0.5], [0.0, 0.0], [0.0, 0.0]])
    return parts, scales


def _lora_dims(parts) -> torch.Tensor:
    return torch.tensor([[a.shape[0], b.shape[1], a.shape[1], spans.shape[0]] for a, b, _, _, spans in parts]).view(-1)


def _avx2_lora_stack(weights, norms, head, meta, cache, x, cos, sin, parts, scales):
    """hk_stack_forward_lora of one layer through the avx2 library here (ctypes, as fused_lora calls it)."""
    from hearth.kernels.fused_layer import step_args

    so, layer, mms = _avx2_built_layer(("hk_lora_new", "hk_lora_free", "hk_stack_forward_lora"), weights, norms, head)
    p = native.ctypes.c_void_p
    dims = _lora_dims(parts)
    lora = so.hk_lora_new(*[(p * 4)(*[part[j].data_ptr() for part in parts]) for j in range(5)], dims.data_ptr())
    one = lambda t: (p * 1)(t.data_ptr())  # noqa: E731
    done = so.hk_stack_forward_lora((p * 1)(layer), (p * 1)(lora), 1, x.data_ptr(), x.shape[0], scales.data_ptr(),
                                    scales.shape[1], one(cos), one(sin), one(cache), *step_args(cache, meta))
    so.hk_lora_free(lora)
    so.hk_layer_free(layer)
    assert done == 1
    return x


@pytest.mark.skipif(AVX2 is not None, reason=f"the LoRA stack is compared with the avx2 tier's, which {AVX2}")
@pytest.mark.parametrize("name", list(LAYERS))
def test_fused_lora_stack_matches_the_avx2_stack(neon, name):
    """hk_stack_forward_lora (csrc/lora_layer.h: each linear's low-rank term after its matmul, per-row
    scales of two adapters) against the avx2 library's on the same inputs, held as the fused layer is
    (1e-4 of the stream's scale); the rows whose scales are all 0 are hk_layer_forward's bit for bit."""
    _, script, run = neon
    weights, norms, head, meta, cache, x, cos, sin = _layer_inputs(name)
    parts, scales = _lora_inputs(name)
    s = script()
    plans = [_plan(s, [t], t.shape[1]) for t in weights]
    layer = s.call("hk_layer_new", *plans, s.pointers(*[None if t is None else s.tensor(t) for t in norms]),
                   s.tensor(head[0]), *head[1:])
    lora = s.call("hk_lora_new", *[s.pointers(*[s.tensor(part[j]) for part in parts]) for j in range(5)],
                  s.tensor(_lora_dims(parts)))
    q_start, q_len, seq_lens, tables = meta.native_split()[1]
    step = [0, 16 * 16, 16, s.tensor(meta.slot_mapping), 2, s.tensor(q_start), s.tensor(q_len), s.tensor(seq_lens),
            s.tensor(tables), tables.shape[1], None, 0]
    x_lora, x_base = s.output(x), s.output(x)
    done = s.call("hk_stack_forward_lora", s.pointers(layer), s.pointers(lora), 1, x_lora, 3, s.tensor(scales), 2,
                  s.pointers(s.tensor(cos)), s.pointers(s.tensor(sin)), s.pointers(s.tensor(cache)), *step)
    rc = s.call("hk_layer_forward", layer, x_base, 3, s.tensor(cos), s.tensor(sin), s.tensor(cache), *step)
    run(s)
    assert s.result(done) == 1 and s.result(rc) == 0
    got, base = s.read(x_lora), s.read(x_base)
    assert torch.equal(got[1:], base[1:])
    assert float((got[0] - base[0]).abs().max()) > 1e-2 * float(base[0].abs().max())  # the terms moved row 0
    want = _avx2_lora_stack(weights, norms, head, meta, cache.clone(), x.clone(), cos, sin, parts, scales)
    torch.testing.assert_close(got, want, atol=1e-4 * float(want.abs().max()), rtol=0)


@pytest.mark.skipif(AVX2 is not None, reason=f"the experts are compared with the avx2 tier's, which {AVX2}")
@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_K], ids=lambda q: q.name)
def test_moe_experts_match_the_avx2_library(neon, qtype):
    """hk_moe (csrc/moe.h) on stacked experts: a decode row (its k experts' gate | up in one matmul) and
    several rows grouped by expert, against the exact twin within tests/backends/test_cpu_experts.py's
    bound (3e-2 of max|out|), and against the avx2 library's (hearth.backends.cpu_experts on the same
    bytes: the same 8-bit activations and integer dots, f32 sums in another order, and neon's own
    exp in act(gate) * up, which moves some down-projection activations across a rounding edge of their
    8-bit code: measured 3.7e-4 of max|out|), held to 1e-3."""
    from hearth.backends.cpu_experts import NativeExperts
    from hearth.loader.gguf_loader import GGUFTensor
    from tests.backends.test_cpu_experts import EXACT_TOL, exact, rel, stacked

    _, script, run = neon
    rng, g = np.random.default_rng(int(qtype)), torch.Generator().manual_seed(int(qtype))
    e, hidden, inter = 5, 256, 256
    gate, up, down = stacked(qtype, e, inter, hidden, rng), stacked(qtype, e, inter, hidden, rng), \
        stacked(qtype, e, hidden, inter, rng)
    flat = [GGUFTensor("w", qtype, (t.shape[0] * t.shape[1], t.shape[2]), t.data) for t in (gate, up, down)]
    s, cases = script(), []
    gu, dn = _plan(s, flat[:2], hidden), _plan(s, flat[2:], inter)
    for rows, k in ((1, 2), (1, e), (7, 2), (12, 1)):
        x = torch.randn(rows, hidden, generator=g)
        weights, ids = torch.softmax(torch.randn(rows, e, generator=g), -1).topk(k, dim=-1)
        out = s.output(torch.zeros(rows, hidden))
        rc = s.call("hk_moe", gu, dn, e, 0, s.tensor(x), rows, hidden, s.tensor(ids.contiguous()),
                    s.tensor(weights.contiguous()), k, out, hidden)
        cases.append((x, weights, ids, out, rc))
    run(s)
    avx2 = NativeExperts(gate, up, down, "silu", 0, native.open_tier("avx2"))
    for x, weights, ids, out, rc in cases:
        assert s.result(rc) == 0
        assert rel(s.read(out), exact(gate, up, down, x, weights, ids)) <= EXACT_TOL
        assert rel(s.read(out), avx2(x, weights, ids)) <= 1e-3
