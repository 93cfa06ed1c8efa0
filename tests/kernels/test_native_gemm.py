"""The GEMMs that run where AMX does not (the avx512 tier), against the slow, obvious twin (gguf-py's
dequantization, then an f64 matmul): the int8 VNNI GEMM (csrc/gemm_vnni.h) for batches from 10 rows,
also against the GEMV (rows_dot, below 10 rows) on the same rows, prefills (a plan's gemm_min_rows
on) included.

Bounds. int8: the activations are the GEMV's (8 bits with a scale per 16 values), so the twin's
bound is test_native.assert_act8_close's (ACT8_TOL). Against the GEMV: both multiply the same 8-bit
codes by the same weight codes exactly (integer dot products per 16 weights) and differ only in how
they add the ~K/16 float group terms (s d_x dot + o a_x, each rounded at 2^-24 relative; the
affine types' s q and o terms can be a few times |w|): GEMV_TOL * (|x| @ |W|.T), ~K/16 * 2^-24 * a
few, 50x what these shapes show (<= 2e-7) and ~400x under ACT8_TOL, so a misplaced code or scale
(errors of the order of |w x|) cannot pass."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf.quants import quantize as gguf_quantize

from hearth.kernels import native
from hearth.layers.quant import as_bytes
from hearth.loader.gguf_loader import GGUFTensor
from tests.kernels.test_native import ACT8_TOL, K_QUANTS, assert_act8_close, widths
from tests.layers.test_quant import NATIVE_QUANTS as QUANTS, gguf_reference, random_tensor

INT8 = pytest.mark.skipif(
    not native.vnni_gemm(),
    reason="the int8 VNNI GEMM does not run here: no native kernels (AVX-512 VNNI), or AMX tiles take these rows")
GEMV_TOL = 1e-5
ROWS = (10, 23, 77)  # the threshold; odd counts: tails of the 6-row register block (23 = 3 * 6 + 5, 77 = 12 * 6 + 5)
PREFILL = 64  # the layers' gemm_min_rows: a plan built as a model's, so 77 rows are a prefill's
OUT = 101  # three 32-row panels and a ragged one (5 features)


def linear(ts, k: int, gemm_min_rows: int = 0) -> tuple[native.NativeMatmul, torch.Tensor]:
    """The kernels' matmul over GGUF tensors `ts` side by side, and their exact weights (f32)."""
    mm = native.NativeMatmul([(as_bytes(t.data, t.qtype), int(t.qtype)) for t in ts], k, gemm_min_rows)
    return mm, torch.cat([torch.from_numpy(gguf_reference(t)) for t in ts])


def gemv(mm: native.NativeMatmul, x: torch.Tensor) -> torch.Tensor:
    """The same rows through the GEMV: batches below its threshold."""
    step = native.batch_min_rows() - 1
    return torch.cat([mm(x[i:i + step]) for i in range(0, x.shape[0], step)])


def assert_near_gemv(y: torch.Tensor, yv: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> None:
    err = (y.double() - yv.double()).abs()
    bound = GEMV_TOL * (x.double().abs() @ w.double().abs().T) + 1e-6
    assert bool((err <= bound).all()), f"worst err/bound vs the GEMV {float((err / bound).max()):.3f}"


@pytest.mark.skipif(not native.has("gemm"), reason="no batch GEMMs here (the avx2 library: one GEMV, test_native_avx2)")
def test_batch_min_rows_is_where_rows_stop_summing_as_the_gemv():
    """The runner's first row regime (native.batch_min_rows()) is the kernels' boundary, at every
    tier: below it each row equals its 1-row GEMV bit for bit; from it on (AMX tiles or the int8
    GEMM) the f32 sums run in another order, so some output differs in its last bits."""
    b = native.batch_min_rows()
    assert b > 1
    mm, _ = linear([random_tensor(Q.Q4_K, 64, 512, np.random.default_rng(4))], 512)
    x = torch.randn(b, 512)
    single = torch.cat([mm(x[i:i + 1]) for i in range(b)])
    assert torch.equal(mm(x[:b - 1]), single[:b - 1])
    assert not torch.equal(mm(x), single)


@pytest.mark.skipif(not native.has("gemm"), reason="no batch GEMMs here (the avx2 library: one GEMV, test_native_avx2)")
@pytest.mark.parametrize("qtype", QUANTS, ids=lambda q: q.name)
def test_batch_invariant_sums_a_verify_step_as_the_gemv(qtype):
    """Within native.batch_invariant(n), a step of up to n rows (10 to 48: past the first regime,
    below the prefill GEMMs') sums each row as its 1-row GEMV does, bit for bit: with AMX on the
    exact tiles (every type, K with a short last superblock for the 32-wide ones; 301 outputs: 18
    tiles of 16 and a GEMV tail of 13, an odd one: a run's last weight row alone, as on the avx512 GEMV), the activation rows past a multiple of 16 on the GEMV when
    they are 8 or fewer (17, 24, 33, 40), on a tile pass of their own when more (25, 41), else on
    the GEMV; outside it the batch GEMM takes those rows again (their bits differ: the control)."""
    k = widths(qtype)[-1]
    mm, _ = linear([random_tensor(qtype, 301, k, np.random.default_rng(5))], k, gemm_min_rows=64)
    x = torch.randn(48, k) * torch.rand(48, 1) * 10
    single = torch.cat([mm(x[i:i + 1]) for i in range(48)])
    with native.batch_invariant(63):
        for rows in (10, 16, 17, 24, 25, 33, 40, 41, 48):
            assert torch.equal(mm(x[:rows]), single[:rows]), rows
    assert not torch.equal(mm(x[:40]), single[:40])


@INT8
@pytest.mark.parametrize("qtype", QUANTS, ids=lambda q: q.name)
def test_int8_gemm_against_exact_twin_and_gemv(qtype):
    """Every type; K = 96 and 576 (32-wide types: an odd block count, a short last superblock), 512,
    and for the k-quants 256 and 768; odd M and N (tails of rows and of a panel)."""
    rng, g = np.random.default_rng(int(qtype) + 7), torch.Generator().manual_seed(int(qtype))
    for k in widths(qtype):
        mm, w = linear([random_tensor(qtype, OUT, k, rng)], k, PREFILL)
        for m in ROWS:
            x = torch.randn(m, k, generator=g) * torch.rand(m, 1, generator=g) * 10
            y = mm(x)
            assert_act8_close(y, x, w)
            assert_near_gemv(y, gemv(mm, x), x, w)


@INT8
@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_0], ids=lambda q: q.name)
@pytest.mark.parametrize("m", [10, 23])
def test_int8_gemm_scales_each_16_activations(qtype, m):
    """As the GEMV (test_native.test_each_16_activations_have_their_own_scale): a 32-block whose
    first half is 1e4 times its second keeps its small half to 1/254 (one scale per 32 would round
    it to zero), also where the weights' scales cover 32 (the panel's 32-wide groups)."""
    k = 256
    w_small_half = torch.zeros(40, k)
    w_small_half[:, 16:32] = torch.linspace(-1, 1, 40 * 16).view(40, 16)  # weights only on the small half
    t = GGUFTensor("w", qtype, (40, k), gguf_quantize(w_small_half.numpy(), qtype))
    mm, w = linear([t], k)
    x = torch.zeros(m, k)
    x[:, :16], x[:, 16:32] = 10.0, torch.linspace(1e-3, 2e-3, m * 16).view(m, 16)
    exact = x.double() @ w.double().T
    assert float(exact.abs().min()) > 0
    err = (mm(x).double() - exact).abs()
    assert bool((err <= ACT8_TOL * 2e-3 * w.abs().sum(1).double() + 1e-9).all()), float((err / exact.abs()).max())


def mixed_parts(rng) -> list:
    """q|k|v-like parts whose 32-row panels straddle types of 16- and 32-wide scale groups (Q6_K
    next to Q4_K, Q5_0 and Q8_0): 97 rows."""
    return [random_tensor(Q.Q4_K, 40, 512, rng), random_tensor(Q.Q6_K, 24, 512, rng),
            random_tensor(Q.Q5_0, 20, 512, rng), random_tensor(Q.Q8_0, 13, 512, rng)]


def strided_call(mm: native.NativeMatmul, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """mm on m strided rows (one of them zero) into a strided slice of a NaN-filled buffer: (x, y)."""
    wide = torch.randn(m, 600) * 4
    wide[m // 2] = 0
    x = wide[:, 40:552]  # row stride 600
    out = torch.full((m, 140), float("nan"))
    y = mm(x, out=out[:, 20:117])
    assert y.data_ptr() == out[:, 20:].data_ptr() and y.shape == (m, 97)
    assert torch.equal(y[m // 2], torch.zeros(97))
    assert out[:, :20].isnan().all() and out[:, 117:].isnan().all()
    return x, y


@INT8
def test_int8_panels_across_parts_of_mixed_types_and_strided_io():
    mm, w = linear(mixed_parts(np.random.default_rng(5)), 512)
    x, y = strided_call(mm, 29)
    assert_act8_close(y, x, w)
    assert_near_gemv(y, gemv(mm, x), x, w)


@INT8
@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.Q6_K, Q.Q5_1], ids=lambda q: q.name)
def test_int8_rows_bit_identical_whatever_the_batch(qtype):
    """A row's sums depend on its own activations and the panel alone (not on its place in the
    6-row register blocks, the chunk of rows or the batch): what lets the scheduler batch 10+ rows."""
    mm, _ = linear([random_tensor(qtype, 70, 512, np.random.default_rng(int(qtype)))], 512, PREFILL)
    x = torch.randn(200, 512)
    big = mm(x)
    for a, b in ((0, 10), (3, 16), (5, 70), (61, 200), (190, 200)):
        assert torch.equal(mm(x[a:b]), big[a:b]), (a, b)
    assert torch.equal(mm(torch.cat([x[7:8], x[100:120]]))[:1], big[7:8])


@INT8
@pytest.mark.parametrize("qtype,k,big", [(Q.Q4_K, 4864, 60), (Q.Q6_K, 4864, 60), (Q.Q5_1, 4864, 60), (Q.Q4_0, 576, 340)],
                         ids=lambda v: getattr(v, "name", str(v)))
def test_int8_decode_slices_of_k_equal_whole_panels(qtype, k, big):
    """A decode-sized call (every row in one chunk of rows) builds each panel a slice of K at a time
    (csrc/gemm_vnni_slices.h: 512 weights, in L1) and carries the sums in y between slices; past one
    chunk (a prefill) whole panels are built a group at a time. Each row's outputs are the same bits
    either way: K = 4864 ends in a short slice (19 superblocks; 152 blocks of 32), 576 in a short
    superblock; `big` rows are past one chunk at that K."""
    mm = matmul([random_tensor(qtype, 70, k, np.random.default_rng(int(qtype) + 60))], k)
    x = torch.randn(big, k, generator=torch.Generator().manual_seed(60)) * 3
    whole = mm(x)
    for a, b in ((0, 16), (big - 12, big)):
        assert torch.equal(mm(x[a:b]), whole[a:b]), (a, b)


@pytest.mark.skipif(not native.has("gemm") or native.bf16_tiles(), reason="AMX tiles take these rows, or no C++ GEMMs")
@pytest.mark.parametrize("m", [23, 70], ids=["int8", "prefill"])
def test_mlp_and_residual_paths_take_the_gemms(m):
    """hk_mlp and hk_linear_residual multiply as hk_linear does (10+ rows, a prefill's 70 included: the
    int8 GEMM): the residual add is bit-exact on the linear's output; the MLP's down projection is
    held to the twin's 8-bit bound on act(gate) * up (torch's silu: the kernel's exp differs by an ulp)."""
    rng, g, hidden, inter = np.random.default_rng(9), torch.Generator().manual_seed(9), 256, 256  # K % 256 == 0
    gate_up, _ = linear([random_tensor(Q.Q4_K, inter, hidden, rng), random_tensor(Q.Q4_K, inter, hidden, rng)],
                        hidden, 64)
    down, wd = linear([random_tensor(Q.Q6_K, hidden, inter, rng)], inter, 64)
    r, h = torch.randn(m, hidden, generator=g), torch.randn(m, inter, generator=g)
    assert torch.equal(down.add_to(h, r.clone()), r + down(h))
    gate, up = gate_up(r).split(inter, dim=-1)
    mid = torch.nn.functional.silu(gate) * up
    got = native.mlp_add_to(gate_up, down, "silu", r.clone(), None, 0.0, None, 0.0) - r
    assert_act8_close(got, mid, wd)


DIRECT = (Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q4_K, Q.Q5_K, Q.Q6_K)
"""The types whose panels are unpacked straight from 16 rows' blocks (csrc/gemm_vnni_panels.h)."""
QWEN_K = (896, 1536, 4864, 8960)
"""Qwen2.5-Coder-0.5B's and 1.5B's in_features (hidden and MLP widths); 896 is no multiple of 256: the
0.5B's matrices of that width are Q5_0 and Q8_0."""


def matmul(ts, k: int) -> native.NativeMatmul:
    """The kernels' matmul over GGUF tensors `ts` side by side (a prefill's plan), no reference weights."""
    return native.NativeMatmul([(as_bytes(t.data, t.qtype), int(t.qtype)) for t in ts], k, PREFILL)


@INT8
@pytest.mark.parametrize("qtype", DIRECT, ids=lambda q: q.name)
def test_int8_gemm_direct_panels_equal_the_staged_ones(qtype):
    """16 output features of one part of these types are unpacked straight from their blocks; others
    (features across parts, a ragged half) through a staging row each (vnni_row + vnni_half). The same
    weights behind a 5-feature part put most of their features in halves of the other kind: every
    output bit for bit as alone, so both unpack the same codes, scales and offsets. Widths: the
    kernels' test widths and the Qwen models' in_features (896 and 1536: q|k|v, o, gate|up; 4864 and
    8960: down), for the 32-wide types too (896: a short last superblock)."""
    rng, g = np.random.default_rng(int(qtype) + 40), torch.Generator().manual_seed(int(qtype) + 40)
    for k in widths(qtype) + QWEN_K:
        if k % (256 if qtype in K_QUANTS else 32):
            continue
        w, front = random_tensor(qtype, 37, k, rng), random_tensor(qtype, 5, k, rng)
        alone, behind = matmul([w], k), matmul([front, w], k)
        for m in (16, 77):  # a decode batch; a prefill
            x = torch.randn(m, k, generator=g) * torch.rand(m, 1, generator=g) * 10
            assert torch.equal(behind(x)[:, 5:], alone(x)), (k, m)


@INT8
@pytest.mark.parametrize("order", [(Q.Q4_K, Q.Q6_K), (Q.Q6_K, Q.Q4_K)], ids=lambda o: "-".join(q.name for q in o))
def test_int8_direct_panel_halves_of_two_scale_groups(order):
    """A panel whose halves are both direct, Q4_K (scales per 32) beside Q6_K (per 16), in either order,
    takes the finer group: against the exact weights and the GEMV (with 32-wide groups Q6_K's offsets
    would be read for every other 16 weights only)."""
    rng, g, k = np.random.default_rng(41), torch.Generator().manual_seed(41), 1536
    mm, w = linear([random_tensor(q, 16, k, rng) for q in order], k, PREFILL)
    x = torch.randn(16, k, generator=g) * 3
    y = mm(x)
    assert_act8_close(y, x, w)
    assert_near_gemv(y, gemv(mm, x), x, w)
