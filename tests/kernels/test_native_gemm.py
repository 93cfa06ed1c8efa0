"""The int8 VNNI GEMM (csrc/gemm_vnni.h: batches and prefills of 10 rows or more where AMX does not
run, the avx512 tier) against the slow, obvious twin (gguf-py's dequantization, then an f64 matmul)
and against the GEMV (rows_dot, below 10 rows) on the same rows.

Bounds: the activations are the GEMV's (8 bits per 32 values), so the twin's bound is
test_native.assert_act8_close's (ACT8_TOL). Against the GEMV: both multiply the same 8-bit codes by
the same weight codes exactly (integer dot products per 16 or 32 weights) and differ only in how
they add the ~K/16 float group terms (s d_x dot + o a_x, each rounded at 2^-24 relative; the
affine types' s q and o terms can be a few times |w|): GEMV_TOL * (|x| @ |W|.T), ~K/16 * 2^-24 * a
few, 70x what these shapes show (<= 1.5e-7) and ~400x under ACT8_TOL, so a misplaced code or scale
(errors of the order of |w x|) cannot pass."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from hearth.kernels import native
from hearth.layers.quant import as_bytes
from tests.kernels.test_native import assert_act8_close, widths
from tests.layers.test_quant import QUANTS, gguf_reference, random_tensor

pytestmark = pytest.mark.skipif(
    native.vnni_gemm_min_rows() == 0,
    reason="the int8 VNNI GEMM does not run here: no native kernels (AVX-512 VNNI), or AMX tiles take these rows")

GEMV_TOL = 1e-5
ROWS = (10, 23, 77)  # the threshold; odd counts: tails of the 6-row register block (23 = 3 * 6 + 5, 77 = 12 * 6 + 5)
OUT = 101  # three 32-row panels and a ragged one (5 features)


def gemv(mm: native.NativeMatmul, x: torch.Tensor) -> torch.Tensor:
    """The same rows through the GEMV: batches below its threshold."""
    step = native.vnni_gemm_min_rows() - 1
    return torch.cat([mm(x[i:i + step]) for i in range(0, x.shape[0], step)])


def assert_near_gemv(y: torch.Tensor, yv: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> None:
    err = (y.double() - yv.double()).abs()
    bound = GEMV_TOL * (x.double().abs() @ w.double().abs().T) + 1e-6
    assert bool((err <= bound).all()), f"worst err/bound vs the GEMV {float((err / bound).max()):.3f}"


def test_threshold_is_the_amx_regime_boundary():
    """The runner's row regimes (AMX_MIN_ROWS, native_max_rows) cover this GEMM's boundary."""
    from hearth.runner.model_runner import AMX_MIN_ROWS

    assert native.vnni_gemm_min_rows() == AMX_MIN_ROWS


@pytest.mark.parametrize("qtype", QUANTS, ids=lambda q: q.name)
def test_gemm_against_exact_twin_and_gemv(qtype):
    """Every type; K = 96 and 576 (32-wide types: an odd block count, a short last superblock), 512,
    and for the k-quants 256 and 768; odd M and N (tails of rows and of a panel)."""
    rng, g = np.random.default_rng(int(qtype) + 7), torch.Generator().manual_seed(int(qtype))
    for k in widths(qtype):
        t = random_tensor(qtype, OUT, k, rng)
        w = torch.from_numpy(gguf_reference(t))
        mm = native.NativeMatmul([(as_bytes(t.data, qtype), int(qtype))], k)
        for m in ROWS:
            x = torch.randn(m, k, generator=g) * torch.rand(m, 1, generator=g) * 10
            y = mm(x)
            assert_act8_close(y, x, w)
            assert_near_gemv(y, gemv(mm, x), x, w)


def test_panels_across_parts_of_mixed_types_and_strided_io():
    """q|k|v-like parts whose 32-row panels straddle types with 16- and 32-wide scale groups
    (Q6_K next to Q4_K and Q5_0), strided x and y, a zero row."""
    rng = np.random.default_rng(5)
    ts = [random_tensor(Q.Q4_K, 40, 512, rng), random_tensor(Q.Q6_K, 24, 512, rng),
          random_tensor(Q.Q5_0, 20, 512, rng), random_tensor(Q.Q8_0, 13, 512, rng)]
    mm = native.NativeMatmul([(as_bytes(t.data, t.qtype), int(t.qtype)) for t in ts], 512)
    w = torch.cat([torch.from_numpy(gguf_reference(t)) for t in ts])
    wide = torch.randn(29, 600) * 4
    wide[11] = 0
    x = wide[:, 40:552]  # row stride 600
    out = torch.full((29, 140), float("nan"))
    y = mm(x, out=out[:, 20:117])
    assert y.data_ptr() == out[:, 20:].data_ptr() and y.shape == (29, 97)
    assert_act8_close(y, x, w)
    assert_near_gemv(y, gemv(mm, x), x, w)
    assert torch.equal(y[11], torch.zeros(97))
    assert out[:, :20].isnan().all() and out[:, 117:].isnan().all()


@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.Q6_K, Q.Q5_1], ids=lambda q: q.name)
def test_rows_bit_identical_whatever_the_batch(qtype):
    """A row's sums depend on its own activations and the panel alone (not on its place in the
    6-row register blocks, the chunk of rows or the batch): what lets the scheduler batch 10+ rows."""
    t = random_tensor(qtype, 70, 512, np.random.default_rng(int(qtype)))
    mm = native.NativeMatmul([(as_bytes(t.data, t.qtype), int(t.qtype))], 512, 64)
    x = torch.randn(200, 512)
    big = mm(x)
    for a, b in ((0, 10), (3, 16), (5, 70), (61, 200), (190, 200)):
        assert torch.equal(mm(x[a:b]), big[a:b]), (a, b)
    assert torch.equal(mm(torch.cat([x[7:8], x[100:120]]))[:1], big[7:8])


def test_mlp_and_residual_paths_take_the_gemm():
    """hk_mlp and hk_linear_residual on a prefill-sized M multiply as hk_linear does: the residual add
    is bit-exact on the linear's output; the MLP's down projection is held to the twin's bound on
    act(gate) * up (torch's silu: the kernel's exp differs by an ulp, below the 8-bit rounding)."""
    rng, hidden, inter, m = np.random.default_rng(9), 256, 256, 70  # k-quants: K % 256 == 0
    gu = [random_tensor(Q.Q4_K, inter, hidden, rng), random_tensor(Q.Q4_K, inter, hidden, rng)]
    dn = random_tensor(Q.Q6_K, hidden, inter, rng)
    gate_up = native.NativeMatmul([(as_bytes(t.data, t.qtype), int(t.qtype)) for t in gu], hidden, 64)
    down = native.NativeMatmul([(as_bytes(dn.data, dn.qtype), int(dn.qtype))], inter, 64)
    r = torch.randn(m, hidden)
    h = torch.randn(m, inter)
    assert torch.equal(down.add_to(h, r.clone()), r + down(h))
    gate, up = gate_up(r).split(inter, dim=-1)
    mid = torch.nn.functional.silu(gate) * up
    got = native.mlp_add_to(gate_up, down, "silu", r.clone(), None, 0.0, None, 0.0)
    assert_act8_close(got - r, mid, torch.from_numpy(gguf_reference(dn)))
