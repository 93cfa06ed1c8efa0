"""Quantized linear layers and the embedding against x @ dequantize(W).T from gguf-py.

Tolerances, stated once:
  * the native path below gemm_min_rows rounds activations to 8 bits per 16 or 32 values (d = max|x| / 127,
    so each activation moves by at most d / 2): it stays within ACT8_TOL * (blockmax32|x| @ |W|.T);
  * fast paths (bf16 activations, bf16 scales/zeros, bf16 output) stay within
    FAST_TOL * (|x| @ Wmax.T), where Wmax[n, k] is the largest |w| in k's 32-wide group of row n
    (bf16 unit roundoff is 2**-9; a few roundings of terms no bigger than the group's max);
  * the exact policy (f32 on blocks dequantized per call) stays within EXACT_TOL * (|x| @ |W|.T);
  * the embedding and the dequantizer are bit-exact.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize as gguf_dequantize

from hearth.errors import UnsupportedError
from hearth.kernels.qmatmul import int4_dequant_t, int4_matmul, pack_int4
from hearth.layers.embedding import Embedding
from hearth.layers.quant import dequantize
from hearth.backends import select
from hearth.backends.base import Backend
from hearth.backends.cpu_linear import NativePart, native_paths
from hearth.layers.linear import TORCH_PATHS, DensePart, Int4Part, Int8Part, build_linear, use_linear_policy
from hearth.loader.gguf_loader import GGUFFile, GGUFTensor
from tests.layers.test_quant import FLOATS, QUANTS, assert_bit_exact, gguf_reference, random_tensor

FAST_TOL = 2.0 ** -8
ACT8_TOL = 1.01 / 254  # +1%: the float rounding of x / d before it is rounded to an integer
EXACT_TOL = 1e-5
INT8_TOL = 0.51 / 127  # requantized rows (Int8Part): a weight moves by at most half a step, max|w_row| / 127
FAST, TORCH = select("cpu"), Backend()
"""The CPU backend at this machine's tier (the torch backend at the torch tier), and the torch backend."""
FAST_PATHS = TORCH_PATHS if type(FAST) is Backend else native_paths()
BATCHES = (1, 3, 40, 70)  # 40: native AMX tiles or int4's bf16 GEMM; 70 >= every gemm_min_rows: bf16 tiles


def reference(ts: list[GGUFTensor]) -> torch.Tensor:
    return torch.from_numpy(np.concatenate([gguf_reference(t) for t in ts]))


def group_max(w: torch.Tensor) -> torch.Tensor:  # [N, K] -> [N, K]: max |w| of each 32-wide group
    n, k = w.shape
    return w.abs().view(n, k // 32, 32).amax(-1, keepdim=True).expand(-1, -1, 32).reshape(n, k)


def block_max(x: torch.Tensor) -> torch.Tensor:  # [M, K] -> [M, K]: max |x| of each 32-wide block
    return group_max(x)


def assert_fast_close(y: torch.Tensor, x: torch.Tensor, w: torch.Tensor, act8: bool = False,
                      int8_rows: torch.Tensor | None = None) -> None:
    """act8: the bound of the native path's 8-bit activations, else of the bf16 paths; int8_rows: bool [N],
    the outputs whose weights were requantized to int8 rows (their requantization error on top)."""
    err = (y - x @ w.T).abs()
    if act8:
        bound = ACT8_TOL * (block_max(x) @ w.abs().T) + 1e-6 * (x.abs() @ w.abs().T)
    else:
        bound = FAST_TOL * (x.abs() @ group_max(w).T)
    if int8_rows is not None:
        bound = bound + INT8_TOL * x.abs().sum(1, keepdim=True) * (w.abs().amax(1) * int8_rows)
    assert bool((err <= bound).all()), f"worst err/bound {float((err / bound).max()):.3f}"


def assert_linear_close(lin, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> None:
    """lin(x) against x @ w.T, with the bound of the path lin takes for x's row count."""
    y = lin(x) if bias is None else lin(x) - bias
    x2 = x.reshape(-1, x.shape[-1])
    act8 = any(isinstance(p, NativePart) and x2.shape[0] < p.gemm_min_rows for p in lin.parts)
    int8 = torch.cat([torch.full((p.out_features,), isinstance(p, Int8Part)) for p in lin.parts])
    assert_fast_close(y.reshape(x2.shape[0], -1), x2, w, act8=act8, int8_rows=int8 if int8.any() else None)


def assert_exact_close(y: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> None:
    err = (y - x @ w.T).abs()
    assert bool((err <= EXACT_TOL * (x.abs() @ w.abs().T) + 1e-30).all())


# ---- the int4pack kernel: formula and packed layout ----

def test_int4pack_formula_layout_padding_and_chunks():
    """W = sum_p s_p * (q_p - 8) + z_p on the kernel and on the bf16 expansion; 80 rows (padded to
    128) arriving in uneven chunks (the packer carries partial 64-row blocks over)."""
    g = torch.Generator().manual_seed(0)
    n, k, planes = 80, 128, 2
    q = torch.randint(0, 16, (n, planes, k), dtype=torch.uint8, generator=g)
    s = torch.rand(n, planes, k // 32, generator=g).bfloat16().float()  # representable in bf16
    z = torch.randn(n, planes, k // 32, generator=g).bfloat16().float()
    w = pack_int4(n, k, planes, [(q[a:b], s[a:b], z[a:b]) for a, b in [(0, 50), (50, 51), (51, 80)]])
    expand = lambda t: t.repeat_interleave(32, -1)  # noqa: E731
    ref = ((q.float() - 8) * expand(s) + expand(z)).sum(1)  # [n, k]
    assert w.packed.shape == (128, planes * k // 2)
    wt = int4_dequant_t(w).float()
    # bf16 expansion: a few roundings of terms as large as the planes' values (~8 here)
    assert torch.allclose(wt.T, ref, rtol=0, atol=2.0 ** -6 * float(ref.abs().max()))
    assert torch.equal(int4_dequant_t(w, slice(64, 80)), int4_dequant_t(w)[:, 64:80])
    x = torch.randn(2, k, generator=g).bfloat16()
    assert_fast_close(int4_matmul(x, w).float(), x.float(), ref)


_LAYOUT_CHECK = """
import torch
from hearth.kernels.qmatmul import dense_expansion, int4_dequant_t, int4_matmul, pack_int4
g = torch.Generator().manual_seed(0)
n, k, planes = 80, 64, 2
q = torch.randint(0, 16, (n, planes, k), dtype=torch.uint8, generator=g)
w = pack_int4(n, k, planes, [(q, torch.rand(n, planes, 2, generator=g), torch.randn(n, planes, 2, generator=g))])
eye = torch.eye(k, dtype=torch.bfloat16)
ours, kernels = int4_dequant_t(w).float(), int4_matmul(eye, w).float()  # the kernel's own W.T, bf16-rounded
# a wrong layout moves whole codes (errors ~ the weights); bf16 roundings stay ~2**-8 of them
close = torch.allclose(ours, kernels, rtol=0, atol=2.0 ** -6 * float(kernels.abs().max()))
print(torch.backends.cpu.get_cpu_capability(), dense_expansion() and close)
"""


@pytest.mark.parametrize("capability", ["default", "avx2", "avx512"])
def test_int4_expansion_reads_the_layout_of_each_cpu_capability(capability):
    """torch's int4 packer writes another layout per ATen CPU capability (the torch tier runs with
    whatever the CPU has; ATEN_CPU_CAPABILITY=avx2 is how it is benchmarked): the bf16 expansion
    must equal the kernel's own weights under each (a capability above this CPU's runs the best it has)."""
    env = dict(os.environ, ATEN_CPU_CAPABILITY=capability)
    done = subprocess.run([sys.executable, "-c", _LAYOUT_CHECK], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "True", done.stdout


# ---- every tensor type, fast and exact ----

@pytest.mark.parametrize("native", [True, False], ids=["native", "torch"])
@pytest.mark.parametrize("qtype", FLOATS + QUANTS, ids=lambda q: q.name)
def test_fast_path_matches_dequantized_weight(qtype, native):
    t = random_tensor(qtype, 96, 512, np.random.default_rng(int(qtype)))  # 96: int4 rows get padded
    lin = (FAST if native else TORCH).linear(t)
    w = reference([t])
    part = {"f32": DensePart, "bf16": DensePart, "int4x1": Int4Part, "int4x2": Int4Part, "int8": Int8Part,
            "native": NativePart}
    assert isinstance(lin.parts[0], part[(FAST_PATHS if native else TORCH_PATHS)[qtype]])
    g = torch.Generator().manual_seed(1)
    for m in BATCHES:
        x = torch.randn(m, 512, generator=g)
        assert_linear_close(lin, x, w)


@pytest.mark.parametrize("qtype", FLOATS + QUANTS, ids=lambda q: q.name)
def test_exact_policy_is_f32_exact(qtype):
    t = random_tensor(qtype, 40, 256, np.random.default_rng(3))
    with use_linear_policy(exact=True):
        lin = build_linear(t)
    w = reference([t])
    for m in (1, 5):
        x = torch.randn(m, 256)
        assert_exact_close(lin(x), x, w)


@pytest.mark.parametrize("qtype", [Q.Q4_1, Q.Q8_0, Q.Q6_K], ids=lambda q: q.name)
def test_rows_of_a_small_batch_equal_single_rows(qtype):
    """Below gemm_min_rows each row is computed alone, so batching cannot change a decode's tokens."""
    lin = FAST.linear(random_tensor(qtype, 64, 256, np.random.default_rng(4)))
    x = torch.randn(5, 256)
    assert torch.equal(lin(x), torch.cat([lin(x[i:i + 1]) for i in range(5)]))


def test_gemm_path_in_row_chunks_and_leading_dims():
    t = random_tensor(Q.Q8_0, 200, 256, np.random.default_rng(5))
    with use_linear_policy(gemm_min_rows=4, native_gemm_min_rows=4, gemm_chunk_rows=64):
        lin = FAST.linear(t)
    x = torch.randn(2, 3, 256)  # [..., K]: 6 rows, over the threshold
    y = lin(x)
    assert y.shape == (2, 3, 200)
    assert_fast_close(y.view(6, 200), x.view(6, 256), reference([t]))  # bf16 tiles: not act8


# ---- fused lists ----

def test_fused_mixed_types_and_bias():
    rng = np.random.default_rng(6)
    # gemma3's q|k|v: Q5_0, Q5_0, Q8_0 -> both two-plane int4: one fused part
    qkv = [random_tensor(Q.Q5_0, 64, 256, rng), random_tensor(Q.Q5_0, 32, 256, rng),
           random_tensor(Q.Q8_0, 32, 256, rng)]
    # types that cannot share a layout run as separate parts, outputs concatenated in order
    mixed = [random_tensor(Q.Q4_K, 32, 256, rng), random_tensor(Q.Q6_K, 48, 256, rng),
             random_tensor(Q.Q8_0, 16, 256, rng), random_tensor(Q.Q5_1, 16, 256, rng)]
    native = FAST_PATHS[Q.Q4_K] == "native"  # the native kernels take any mix of block types at once
    for ts, n_parts in ((qkv, 1), (mixed, 1 if native else 3)):
        bias = torch.randn(sum(t.shape[0] for t in ts))
        lin = FAST.linear(ts, bias=bias)
        assert len(lin.parts) == n_parts
        w = reference(ts)
        for m in BATCHES:
            x = torch.randn(m, 256)
            assert_linear_close(lin, x, w, bias)
        with use_linear_policy(exact=True):
            exact = build_linear(ts, bias=bias)
        assert_exact_close(exact(x) - bias, x, w)


def test_fusing_different_in_features_is_an_error():
    rng = np.random.default_rng(7)
    with pytest.raises(UnsupportedError, match="in_features"):
        build_linear([random_tensor(Q.Q8_0, 32, 256, rng), random_tensor(Q.Q8_0, 32, 512, rng)])


# ---- embedding and the tied head ----

@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_K, Q.Q6_K, Q.F32, Q.F16, Q.BF16], ids=lambda q: q.name)
def test_embedding_rows_bit_exact(qtype):
    t = random_tensor(qtype, 300, 256, np.random.default_rng(8))
    ids = torch.tensor([5, 0, 299, 5, 123])
    rows = FAST.embedding(t)(ids)
    assert rows.shape == (5, 256) and rows.dtype == torch.float32
    assert_bit_exact(rows, gguf_reference(t)[ids.numpy()])


def test_tied_head_and_embedding_share_one_file_tensor():
    t = random_tensor(Q.Q8_0, 1000, 128, np.random.default_rng(9))
    emb, head = FAST.embedding(t), FAST.linear(t)
    assert isinstance(emb, Embedding)
    assert emb.raw.data_ptr() == t.data.ctypes.data  # the embedding keeps no copy at all
    repacked = head.weight_bytes
    assert repacked <= 1.25 * t.data.nbytes  # one compact copy for the head (1.18x for Q8_0)
    ids = torch.tensor([3, 999, 0])
    h = emb(ids)
    assert_bit_exact(h, gguf_reference(t)[ids.numpy()])
    assert_linear_close(head, h, reference([t]))


# ---- errors ----

def test_unsupported_type_is_a_clear_error():
    t = GGUFTensor("blk.0.attn_q.weight", Q.IQ2_XXS, (32, 256), np.zeros((32, 66), dtype=np.uint8))
    for build in (FAST.linear, FAST.embedding, TORCH.linear, TORCH.embedding):
        with pytest.raises(UnsupportedError, match=r"blk.0.attn_q.weight: tensor type IQ2_XXS is not "
                                                   r"supported; hearth supports: .*Q4_K"):
            build(t)


# ---- the real files ----

@pytest.fixture(scope="module")
def smollm2(model_path):
    return GGUFFile(model_path("smollm2-135m"))


@pytest.fixture(scope="module")
def gemma3(model_path):
    return GGUFFile(model_path("gemma3-270m"))


def _check_real(g: GGUFFile, groups: list[list[str]], rows: int = 256) -> None:
    """Each (fused) weight, first `rows` rows: dequantizer bit-exact, fast and exact paths close."""
    for names in groups:
        ts = [g.tensor(n) for n in names]
        ts = [GGUFTensor(t.name, t.qtype, (min(rows, t.shape[0]), t.shape[1]), t.data[:rows]) for t in ts]
        for t in ts:
            assert_bit_exact(dequantize(t.data, t.qtype), gguf_dequantize(t.data, t.qtype).astype(np.float32))
        w, k = reference(ts), ts[0].shape[1]
        lin = FAST.linear(ts)
        for m in BATCHES:
            x = torch.randn(m, k)
            assert_linear_close(lin, x, w)
        with use_linear_policy(exact=True):
            assert_exact_close(build_linear(ts)(x), x, w)


def test_real_smollm2_blk0(smollm2):
    p = "blk.0."
    _check_real(smollm2, [[p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"],
                          [p + "ffn_gate.weight", p + "ffn_up.weight"], [p + "ffn_down.weight"],
                          ["token_embd.weight"]])


def test_real_gemma3_mixed_types(gemma3):
    v8 = next(i for i in range(18) if gemma3.tensor(f"blk.{i}.attn_v.weight").qtype == Q.Q8_0)
    k6 = next(i for i in range(18) if gemma3.tensor(f"blk.{i}.ffn_down.weight").qtype == Q.Q6_K)
    p = f"blk.{v8}."
    _check_real(gemma3, [[p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"],
                         [p + "attn_output.weight"], [f"blk.{k6}.ffn_down.weight"]])


def test_smollm2_linears_stay_compact(smollm2):
    """Every matrix of the model, repacked: well under the file's size (Q4_1 -> int4 with bf16
    scale+zero is 0.625 B/weight vs 0.625 in the file; the Q8_0 head 1.25 vs 1.06)."""
    total, threads = 0, torch.get_num_threads()
    torch.set_num_threads(1)  # hundreds of tiny packing ops: on a busy box 2 threads stall at barriers
    try:
        for t in smollm2.tensors.values():
            if len(t.shape) == 2:
                total += build_linear(t).weight_bytes
    finally:
        torch.set_num_threads(threads)
    assert total < 1.1 * smollm2.file_size


def _rss_file_bytes() -> int:
    with open("/proc/self/status") as f:
        line = next(ln for ln in f if ln.startswith("RssFile:"))
    return int(line.split()[1]) * 1024


def test_repacked_file_pages_leave_the_resident_set(smollm2):
    """Reading a tensor faults its file pages in; release_pages gives them back (the data stays
    readable from the file) and refuses anything that is not a read-only memmap."""
    from hearth.layers.residency import release_pages
    t = smollm2.tensor("token_embd.weight")  # 30 MB
    before = gguf_reference(GGUFTensor(t.name, t.qtype, (8, t.shape[1]), t.data[-8:]))
    int(np.asarray(t.data).sum(dtype=np.uint64))  # touch every page
    resident = _rss_file_bytes()
    assert release_pages(t.data)
    assert resident - _rss_file_bytes() > 0.9 * t.data.nbytes
    after = gguf_reference(GGUFTensor(t.name, t.qtype, (8, t.shape[1]), t.data[-8:]))
    assert np.array_equal(before, after)
    assert not release_pages(np.ones(10_000, dtype=np.uint8))  # anonymous memory: left alone
