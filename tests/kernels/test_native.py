"""The C++ GGUF kernels (hearth.kernels.native) against the slow, obvious twin: gguf-py's
dequantization, then an f64 matmul.

Tolerance of the matmul, stated once: activations are rounded to 8 bits per 16 values in the VNNI
loop (d = max|x_group| / 127, q = round(x / d); llama.cpp's q8_0 takes 32) and per 32 on AMX int8 tiles
(from 10 rows), so each activation moves by at most d / 2 = max|x_group| / 254; the integer dot
products are exact and the per-group float sums add ~1e-7 relative. Hence
|y - x @ W.T| <= ACT8_TOL * (groupmax|x| @ |W|.T) + 1e-6 * (|x| @ |W|.T),
with 1% on ACT8_TOL for the float rounding of x / d. Dequantization is bit-exact; the bf16 tiles
equal the exact weights rounded to bf16 (round to nearest even)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf.quants import quantize as gguf_quantize

from hearth.formats.weights import QK_K, WEIGHT_FORMATS
from hearth.kernels import native, tiers
from hearth.layers.quant import as_bytes
from hearth.loader.gguf_loader import GGUFTensor
from tests.layers.test_quant import (E8M0_FIELDS, EXTREME_E8M0, EXTREME_F16, F16_FIELDS, NATIVE_QUANTS as QUANTS,
                                    gguf_reference, random_tensor)

pytestmark = pytest.mark.skipif(not native.available(), reason="native kernels do not run here")

ACT8_TOL = 1.01 / 254
BATCHES = (1, 2, 7, 10, 16, 33)  # from 10 rows on: AMX tiles (16 rows each, a VNNI tail)
K_QUANTS = tuple(q for q, f in WEIGHT_FORMATS.items() if f.block_size == QK_K)  # 256-wide superblocks (IQ4_XS too)


def widths(qtype: Q) -> tuple[int, ...]:
    # 32-wide types: an odd block count (96), a short last superblock (576), whole ones (512)
    return (256, 768) if qtype in K_QUANTS else (96, 512, 576)


def block_max(x: torch.Tensor, width: int = 32) -> torch.Tensor:  # [M, K] -> [M, K]: max |x| per `width` values
    m, k = x.shape
    return x.abs().view(m, k // width, width).amax(-1, keepdim=True).expand(-1, -1, width).reshape(m, k)


def act_group(m: int) -> int:
    """Values per activation scale for an m-row matmul: 32 on AMX int8 tiles (from 10 rows), else 16."""
    return 32 if tiers.active() == "amx" and m >= 10 else 16


def assert_act8_close(y: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> None:
    x, w = x.double(), w.double()
    err = (y.double() - x @ w.T).abs()
    bound = ACT8_TOL * (block_max(x, act_group(x.shape[0])) @ w.abs().T) + 1e-6 * (x.abs() @ w.abs().T)
    assert bool((err <= bound).all()), f"worst err/bound {float((err / bound).max()):.3f}"


@pytest.mark.parametrize("qtype", QUANTS, ids=lambda q: q.name)
def test_matmul_against_exact_twin(qtype):
    rng, g = np.random.default_rng(int(qtype)), torch.Generator().manual_seed(int(qtype))
    for k in widths(qtype):
        t = random_tensor(qtype, 163, k, rng)  # read as 4 interleaved runs of rows, the last one short
        w = torch.from_numpy(gguf_reference(t))
        mm = native.NativeMatmul([(as_bytes(t.data, qtype), int(qtype))], k)
        for m in BATCHES:
            x = torch.randn(m, k, generator=g) * torch.rand(m, 1, generator=g) * 10
            assert_act8_close(mm(x), x, w)


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_0], ids=lambda q: q.name)
def test_each_16_activations_have_their_own_scale(qtype):
    """A 32-block whose first half is 1e4 times its second: one scale per 32 would round the small
    half to zero (the integer codes of +-1e-3 at d = 10 / 127); a scale per 16 keeps it to 1/254."""
    k = 256
    w_small_half = torch.zeros(4, k)
    w_small_half[:, 16:32] = torch.linspace(-1, 1, 64).view(4, 16)  # weights only on the small half
    t = GGUFTensor("w", qtype, (4, k), gguf_quantize(w_small_half.numpy(), qtype))
    w = torch.from_numpy(gguf_reference(t))
    mm = native.NativeMatmul([(as_bytes(t.data, qtype), int(qtype))], k)
    x = torch.zeros(1, k)
    x[0, :16], x[0, 16:32] = 10.0, torch.linspace(1e-3, 2e-3, 16)
    exact = (x.double() @ w.double().T)[0]
    assert float(exact.abs().max()) > 0
    err = (mm(x)[0].double() - exact).abs()
    assert bool((err <= ACT8_TOL * 2e-3 * w.abs().sum(1).double() + 1e-9).all()), (err, exact)


def test_fused_parts_of_mixed_types_and_strided_io():
    """q|k|v of different types in one call; x and y may be row-strided views; zero rows of x give 0."""
    rng = np.random.default_rng(0)
    ts = [random_tensor(Q.Q5_0, 64, 512, rng), random_tensor(Q.Q8_0, 32, 512, rng),
          random_tensor(Q.Q6_K, 48, 512, rng), random_tensor(Q.Q4_K, 16, 512, rng)]
    mm = native.NativeMatmul([(as_bytes(t.data, t.qtype), int(t.qtype)) for t in ts], 512)
    w = torch.cat([torch.from_numpy(gguf_reference(t)) for t in ts])
    wide = torch.randn(7, 600)
    wide[3] = 0
    x = wide[:, 40:552]  # row stride 600
    out = torch.full((7, 200), float("nan"))
    y = mm(x, out=out[:, 20:180])
    assert y.data_ptr() == out[:, 20:].data_ptr() and y.shape == (7, 160)
    assert_act8_close(y, x, w)
    assert torch.equal(y[3], torch.zeros(160))
    assert out[:, :20].isnan().all() and out[:, 180:].isnan().all()


def test_activations_quantized_256_at_a_time_equal_the_per_32_loop():
    """Rows quantized for the natural layout alone (k-quant weights: the GEMV's and the int8 GEMM's
    activations) take 256 values at a time on AVX-512 (csrc/blocks.h quantize256_scale16); a plan that
    also wants the 32-wide types' paired layout takes the loop over blocks of 32. Same codes, scales
    and sums: the k-quant part's outputs bit for bit equal beside a Q8_0 part, on rows with zero, tiny
    (subnormal), huge and mixed groups."""
    rng, g = np.random.default_rng(11), torch.Generator().manual_seed(11)
    for qtype, k in ((Q.Q4_K, 1536), (Q.Q6_K, 768)):
        w, paired = random_tensor(qtype, 48, k, rng), random_tensor(Q.Q8_0, 16, k, rng)
        alone = native.NativeMatmul([(as_bytes(w.data, qtype), int(qtype))], k)
        beside = native.NativeMatmul([(as_bytes(t.data, t.qtype), int(t.qtype)) for t in (paired, w)], k)
        x = torch.randn(9, k, generator=g) * 3
        x[1] = 0
        x[2] *= 1e-39
        x[3] *= 1e30
        x[4, ::3] = 0
        x[5, : k // 2] *= 1e-6
        assert torch.equal(beside(x)[:, 16:], alone(x)), qtype.name


def test_rows_are_independent_of_the_batch():
    """Each output row is computed alone (same operations in the same order, whatever its neighbours
    or its place in the batch) within each regime: below AMX_MIN_ROWS (10) rows the VNNI loop, from
    there on AMX tiles, whose f32 sums run in another order. So batching decodes changes no token
    among batches of 1-9 nor among batches of 10 or more."""
    t = random_tensor(Q.Q4_1, 300, 576, np.random.default_rng(1))  # 18 tiles of 16 rows and 12 rows more
    mm = native.NativeMatmul([(as_bytes(t.data, t.qtype), int(t.qtype))], 576)
    x = torch.randn(20, 576)
    assert torch.equal(mm(x[:9]), torch.cat([mm(x[i:i + 1]) for i in range(9)]))
    big = mm(x)
    assert torch.equal(big[3:13], mm(x[3:13])) and torch.equal(big[:17], mm(x[:17]))
    assert torch.equal(big[2:3], mm(torch.cat([x[2:3], x[8:17]]))[:1])


@pytest.mark.parametrize("qtype", QUANTS, ids=lambda q: q.name)
def test_every_gemv_pass_size_sums_a_row_as_alone(qtype):
    """The GEMV takes GEMV_ROWS rows per pass over a weight row (8 on AVX-512), the rest in one pass of
    fewer: every count of 1-9 rows (each pass size, and one full pass plus one) gives each row's bits
    as a 1-row call, what a verify step's rows must (they are decode rows)."""
    t = random_tensor(qtype, 40, 512, np.random.default_rng(int(qtype)))
    mm = native.NativeMatmul([(as_bytes(t.data, qtype), int(qtype))], 512)
    x = torch.randn(9, 512, generator=torch.Generator().manual_seed(int(qtype)))
    alone = torch.cat([mm(x[i:i + 1]) for i in range(9)])
    for m in range(2, 10):
        assert torch.equal(mm(x[:m]), alone[:m]), m


@pytest.mark.parametrize("k", [512, 2304])
def test_wide_gemv_passes_sum_each_row_as_alone(k):
    """A verify step's 2-32 rows on the AVX-512 GEMV take its wide passes (csrc/gemv_wide.h: 8 rows x
    two weight rows a pass, the offsets' chains after the codes', activations interleaved per
    superblock; where a pass's activations miss L1, Q6_K from 5 rows in K chunks, so at K = 2304
    chunks of 6 and 3 superblocks, and the others past one pass rows_dot's own passes): every row's
    bits are its 1-row GEMV's. Fused parts of the four layouts (lanes: Q4_K, transposed: Q6_K, group
    order: Q2_K, paired: Q8_0, Q4_1) and odd row counts (a run's last weight row alone); 33 rows: the
    passes rows_dot makes past the wide ones' 32. The avx2 library has no wide passes: the same holds."""
    rng = np.random.default_rng(k)
    ts = [random_tensor(Q.Q4_K, 37, k, rng), random_tensor(Q.Q6_K, 19, k, rng), random_tensor(Q.Q8_0, 21, k, rng),
          random_tensor(Q.Q4_1, 9, k, rng), random_tensor(Q.Q2_K, 7, k, rng)]
    mm = native.NativeMatmul([(as_bytes(t.data, t.qtype), int(t.qtype)) for t in ts], k)
    x = torch.randn(33, k, generator=torch.Generator().manual_seed(k)) * torch.rand(33, 1) * 4
    alone = torch.cat([mm(x[i:i + 1]) for i in range(33)])
    with native.batch_invariant(64):
        for m in (*range(2, 18), 23, 24, 32, 33):
            assert torch.equal(mm(x[:m]), alone[:m]), m


@pytest.mark.parametrize("qtype", [Q.Q4_1, Q.Q8_0, Q.Q4_K], ids=lambda q: q.name)
def test_batched_rows_unchanged_by_other_tile_users(qtype):
    """The AMX tiles are configured per kernel (16- or 32-wide int8 steps, bf16 panels); other users
    on the same threads (the bf16 prefill tiles, oneDNN through torch) reconfigure them, so each
    call must set its own layout: a batch of 16 rows gives the same result before and after."""
    t = random_tensor(qtype, 64, 512, np.random.default_rng(2))
    mm = native.NativeMatmul([(as_bytes(t.data, t.qtype), int(t.qtype))], 512, 64)  # bf16 tiles from 64 rows
    x = torch.randn(16, 512)
    before = mm(x)
    mm(torch.randn(128, 512))
    torch.randn(128, 512).bfloat16() @ torch.randn(512, 256).bfloat16()
    assert torch.equal(mm(x), before)


@pytest.mark.skipif(not native.bf16_tiles(), reason="no AMX bf16 tiles at this CPU tier")
@pytest.mark.parametrize("qtype", QUANTS, ids=lambda q: q.name)
def test_bf16_tiles_multiply_the_weights_rounded_to_bf16(qtype):
    """From 64 rows on, W is expanded to bf16 panel by panel (4- and 5-bit types by table lookup):
    with x exact in bf16, y equals x @ bf16(W).T up to f32 sums (products of bf16 are exact)."""
    rng, g = np.random.default_rng(int(qtype) + 100), torch.Generator().manual_seed(int(qtype))
    for k in widths(qtype):
        t = random_tensor(qtype, 37, k, rng)  # a panel of 32 rows and a ragged one
        w = torch.from_numpy(gguf_reference(t)).bfloat16().double()
        mm = native.NativeMatmul([(as_bytes(t.data, qtype), int(qtype))], k, 64)
        x = (torch.randn(70, k, generator=g) * 3).bfloat16().float()  # a ragged last tile of rows
        err = (mm(x).double() - x.double() @ w.T).abs()
        assert bool((err <= 1e-5 * (x.double().abs() @ w.abs().T) + 1e-6).all()), float(err.max())


@pytest.mark.parametrize("qtype", QUANTS, ids=lambda q: q.name)
def test_dequant_rows_bit_exact_and_bf16_tiles(qtype):
    for k in widths(qtype):
        t = random_tensor(qtype, 50, k, np.random.default_rng(2))
        raw, ref = as_bytes(t.data, qtype), gguf_reference(t)
        ids = torch.tensor([7, 0, 49, 7])
        rows = native.dequant_rows(raw, qtype, k, ids).numpy()
        assert np.array_equal(rows.view(np.uint32), ref[ids.numpy()].view(np.uint32))
        tile = native.dequant_bf16(raw, qtype, k, slice(3, 45))
        assert torch.equal(tile, torch.from_numpy(ref[3:45]).bfloat16())


@pytest.mark.parametrize("qtype", QUANTS, ids=lambda q: q.name)
def test_dequant_rows_bit_exact_at_extreme_scales(qtype):
    """f16 scales at +-65504, subnormals and signed zeros, codes all 0x00 or 0xFF (IQ4: the codebook's ends,
    IQ4_XS's sub-scales 0 and 63, whose ls - 32 < 0 must stay signed); MXFP4's E8M0 scales at the ends
    (2^-128 and 2^-127 are f32 subnormals, 2^127 x 12 overflows)."""
    t = random_tensor(qtype, 14, 512, np.random.default_rng(int(qtype) + 5))
    blocks = t.data.reshape(-1, WEIGHT_FORMATS[qtype].type_size)
    f16 = {i for at in F16_FIELDS[qtype] for i in (at, at + 1)}
    blocks[:, [i for i in range(blocks.shape[1]) if i not in f16]] = np.repeat([[0x00], [0xFF]], blocks.shape[0] // 2, 1).T.reshape(-1, 1)
    for at in F16_FIELDS[qtype]:
        d = np.resize(np.array(EXTREME_F16, dtype=np.float16), blocks.shape[0]).reshape(-1, 1)
        blocks[:, at:at + 2] = d.view(np.uint8)
    if qtype in E8M0_FIELDS:  # every exponent against both code bytes (7 against alternating 2)
        blocks[:, E8M0_FIELDS[qtype]] = np.resize(np.array(EXTREME_E8M0, dtype=np.uint8), blocks.shape[0])
    raw, ref = as_bytes(t.data, qtype), gguf_reference(t)
    rows = native.dequant_rows(raw, qtype, 512, torch.arange(14)).numpy()
    assert np.array_equal(rows.view(np.uint32), ref.view(np.uint32))


def test_bad_token_id_is_an_index_error():
    t = random_tensor(Q.Q8_0, 10, 64, np.random.default_rng(3))
    for bad in (10, -1):
        with pytest.raises(IndexError, match="out of range"):
            native.dequant_rows(as_bytes(t.data, t.qtype), Q.Q8_0, 64, torch.tensor([1, bad]))


@pytest.fixture
def fresh_load(monkeypatch):
    """native.lib() decides again: the module's state comes back after the test, and what its cached
    queries (bf16_tiles(), batch_min_rows(), ...) answered for this test's library is forgotten."""
    for name, value in [("_tried", False), ("_lib", None), ("_library", None), ("load_error", None),
                        ("loaded_tier", None), ("library_path", None)]:
        monkeypatch.setattr(native, name, value)
    cached = [f for f in vars(native).values() if hasattr(f, "cache_clear")]
    for f in cached:
        f.cache_clear()
    yield
    for f in cached:
        f.cache_clear()


def test_a_build_says_so_on_stderr_and_a_cached_library_says_nothing(tmp_path, monkeypatch, capsys):
    """The first run compiled for a minute in silence: one line on stderr now (stdout is the answer's)."""
    def build_into(out, command):
        out.write_bytes(b"ELF")
        return out

    monkeypatch.setenv("HEARTH_HOME", str(tmp_path))
    monkeypatch.setattr(native, "build_into", build_into)
    path = native._build(native.AVX2_LIBRARY)
    assert path.parent == tmp_path / "kernels" and capsys.readouterr() == (
        "", "hearth: building the avx2 kernels for this CPU (first run only, about a minute)...\n")
    assert native._build(native.AVX2_LIBRARY) == path and capsys.readouterr() == ("", "")


def test_a_failed_build_falls_back_with_one_warning_line(monkeypatch, caplog, fresh_load):
    def broken(*_):
        raise RuntimeError("g++ failed: gguf_kernels.cpp:1:10: error: boom")

    monkeypatch.setattr(native, "_build", broken)
    tier = tiers.selected().name
    assert native.lib() is None and native.lib() is None  # decided once: no second warning
    lines = [r.getMessage() for r in caplog.records if r.name == "hearth.kernels"]
    # the tier, the compiler's first error, the tier used instead
    assert lines == [f"the {tier} tier's kernels are unavailable (g++ failed: gguf_kernels.cpp:1:10: "
                     "error: boom); using torch"]
    assert tiers.active() == "torch"


@pytest.mark.skipif(tiers.selected().name not in ("amx", "avx512") or tiers.why_not("avx2") is not None,
                    reason="needs an AVX-512 tier selected and the avx2 tier runnable")
def test_a_failed_avx512_build_falls_back_to_the_avx2_library(monkeypatch, caplog, fresh_load):
    """A compiler without the AVX-512 flags on an AVX-512 CPU: the avx2 library runs, not torch."""
    real = native._build

    def no_avx512(library):
        if library is native.AVX512_LIBRARY:
            raise RuntimeError("g++ failed: cc1plus: error: unrecognized command-line option '-mavx512f'")
        return real(library)

    assert [t.name for t in native.fallbacks(tiers.BY_NAME["amx"])] == ["amx", "avx2"]
    assert native.fallbacks(tiers.TORCH) == []
    monkeypatch.setattr(native, "_build", no_avx512)
    tier = tiers.selected().name
    assert native.lib() is not None and native.lib() is native.lib()
    assert tiers.active() == "avx2" and native.has("paged_attention") and not native.has("kv_quant")
    assert native.library_path.name.startswith("gguf_kernels_avx2-")
    lines = [r.getMessage() for r in caplog.records if r.name == "hearth.kernels"]
    assert lines == [f"the {tier} tier's kernels are unavailable (g++ failed: cc1plus: error: "
                     "unrecognized command-line option '-mavx512f'); using avx2"]


@pytest.mark.skipif(not native.bf16_tiles(), reason="no AMX bf16 tiles at this CPU tier")
@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
@pytest.mark.parametrize("scale", [0.002, 0.3], ids=["small", "saturating"])  # gates ~ +-0.3 / +-40
def test_mlp_middle_on_bf16_tiles_is_act_gate_times_up_in_bf16(activation, scale):
    """At prefill size the MLP runs on bf16 tiles, gate | up read out as bf16(act(gate) * up) straight
    into the down projection's tiles. With an identity down projection r gains exactly that middle:
    each value float64's act(gate) * up from the same bf16 inputs, rounded to bf16. Gates far past
    the activation's knees take its clamped / overflowing exponent."""
    rng, g = np.random.default_rng(11), torch.Generator().manual_seed(11)
    hidden, inter, m = 256, 96, 100  # rows: three 32-row blocks and a ragged one
    gate, up = random_tensor(Q.Q8_0, inter, hidden, rng, scale), random_tensor(Q.Q8_0, inter, hidden, rng, 0.002)
    eye = np.eye(hidden, inter, dtype=np.float32)
    down = GGUFTensor("w", Q.Q8_0, (hidden, inter), gguf_quantize(eye, Q.Q8_0))
    as_tiles_see_it = torch.from_numpy(gguf_reference(down)).bfloat16().float()
    assert torch.equal(as_tiles_see_it, torch.from_numpy(eye))
    mm = lambda *ts: native.NativeMatmul([(as_bytes(t.data, t.qtype), int(t.qtype)) for t in ts], ts[0].shape[1], 64)
    wg, wu = (torch.from_numpy(gguf_reference(t)).bfloat16().double() for t in (gate, up))
    r = torch.randn(m, hidden, generator=g) * 2
    x = r.bfloat16().double()
    f = torch.nn.functional
    act = f.silu if activation == "silu" else lambda v: f.gelu(v, approximate="tanh")
    want = act(x @ wg.T) * (x @ wu.T)
    got = native.mlp_add_to(mm(gate, up), mm(down), activation, r.clone(), None, 0.0, None, 0.0) - r
    assert torch.equal(got[:, inter:], torch.zeros(m, hidden - inter))
    sums = 2e-5 * (x.abs() @ wg.abs().T) * (x.abs() @ wu.abs().T)  # f32 sums of gate, up (act' < 1.2)
    half_step = torch.exp2(torch.floor(torch.log2(want.abs())) - 8)  # bf16 keeps 8 significant bits
    # plus 2^-12 for the act's own approximation
    assert bool(((got[:, :inter].double() - want).abs() <= half_step + 2.0 ** -12 * want.abs() + sums).all())


@pytest.mark.parametrize("neox", [True, False], ids=["halves", "pairs"])
@pytest.mark.parametrize("d, rot", [(64, 64), (96, 80), (128, 32)])  # whole, 16-pair tail, partial
def test_qk_rope_against_torch(neox, d, rot):
    """Per-head RMSNorm then rotary embedding of the first rot dims, in place on a strided q | k view:
    against hearth.layers.rotary (torch) after torch's RMSNorm."""
    from hearth.layers.rotary import Rotary

    g = torch.Generator().manual_seed(d + rot)
    T, heads, eps = 37, 3, 1e-6
    wide = torch.randn(T, heads * d + 5, generator=g)
    qk, tail = wide[:, :heads * d].view(T, heads, d), wide[:, heads * d:].clone()  # row stride heads * d + 5
    norm = torch.rand(heads, d, generator=g) + 0.5
    positions = torch.arange(100, 100 + T)
    rope, cache = Rotary(rot, 10000.0, neox), {}
    normed = qk * torch.rsqrt(qk.pow(2).mean(-1, keepdim=True) + eps) * norm
    want = rope(normed.clone(), positions, cache)
    cos, sin = rope.halves(positions, cache)
    native.qk_rope(qk, rot, cos, sin, neox, norm, eps)
    torch.testing.assert_close(qk, want, atol=1e-5, rtol=1e-5)
    assert torch.equal(wide[:, heads * d:], tail)  # the values past q | k untouched


@pytest.mark.skipif(tiers.active() != "amx", reason="needs the amx tier running (its library also serves avx512)")
def test_opening_another_tier_leaves_the_selected_library_alone():
    """open_tier("avx512") is the amx tier's own library file: it must load as a copy, or setting its
    tier turns the AMX tiles off for the whole process."""
    so = native.open_tier("avx512")
    assert so is not native.lib() and so.hk_amx_bf16() == 0
    assert native.lib().hk_amx_bf16() == 1
