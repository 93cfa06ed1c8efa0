"""The Triton kernels of the CUDA backend, run in Triton's interpreter on the CPU (TRITON_INTERPRET=1,
set by tests/conftest.py before triton is imported) against their torch twins, and the checked launch
layer catching each kind of wrong launch by name."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from gguf import GGMLQuantizationType as Q

from hearth.errors import UnsupportedError
from hearth.kernels.gpu.gguf_matmul import QTYPES, gguf_matmul
from hearth.kernels.attention import AttentionMetadata, paged_attention_torch, write_kv_pair_torch
from hearth.kernels.gpu.launch import LaunchError, Tiles, launch
from hearth.kernels.gpu.norm_rope import qk_norm_rope, rms_norm
from hearth.kernels.gpu.paged_attention import paged_attention, write_kv
from hearth.layers.norm import RMSNorm
from hearth.layers.rotary import Rotary
from hearth.layers.quant import as_bytes, dequantize
from tests.kernels.test_tree_attention import CASES as TREE_CASES, PARENTS, fresh, tree_meta
from tests.layers.test_quant import random_tensor

# f32 products and sums in another order than torch's: |err| <= 1e-5 of sum |x||w|
REL = 1e-5
DEV = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
"""Where the kernels run: the interpreter's CPU, or the GPU (benchmarks/gpu_check.sh sets TRITON_INTERPRET=0);
the torch twins run on the CPU."""


@pytest.mark.parametrize("form", ["gemv", "tiled"])
@pytest.mark.parametrize("qtype", QTYPES, ids=lambda q: q.name)
def test_gguf_matmul_equals_the_dequantized_weight(qtype, form):
    n, k = 40, 512  # 40: a partial last tile of outputs
    t = random_tensor(qtype, n, k, np.random.default_rng(int(qtype)))
    raw = as_bytes(t.data, qtype)
    w = dequantize(raw, qtype)  # the torch twin's weight, f32 [n, k]
    x = torch.randn(3 if form == "gemv" else 19, k, generator=torch.Generator().manual_seed(0))
    y = gguf_matmul(x.to(DEV), raw.to(DEV), qtype, n, k, form=form).cpu()
    bound = REL * (x.abs() @ w.abs().T) + 1e-6
    assert bool(((y - x @ w.T).abs() <= bound).all())


def test_launches_are_checked():
    assert os.environ["HEARTH_CHECK_LAUNCHES"] == "1"


def test_a_type_it_does_not_read_is_named():
    t = random_tensor(Q.Q3_K, 8, 256, np.random.default_rng(0))
    with pytest.raises(UnsupportedError, match="not Q3_K"):
        gguf_matmul(torch.zeros(1, 256, device=DEV), as_bytes(t.data, Q.Q3_K).to(DEV), Q.Q3_K, 8, 256)


@triton.jit
def _copy(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)


@triton.jit
def _scribble(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)
    tl.store(src + offs, tl.zeros((BLOCK,), dtype=tl.float32), mask=offs < n)  # writes its input


def test_a_right_launch_runs():
    src, dst = torch.arange(100.0, device=DEV), torch.zeros(100, device=DEV)
    launch(_copy, (4,), dict(src=src, dst=dst, n=100), {"dst": Tiles((32,), (0,))}, ("src",), BLOCK=32)
    assert torch.equal(dst, src)


@pytest.mark.parametrize("case, message", [
    ("uncovered", "kernel _copy: output 'dst': tiles do not cover dim 0 (3 programs x 32 = 96 < 100)"),
    ("overlap", "kernel _copy: output 'dst': its tiles overlap (2 programs along grid axis 1 write the same tile)"),
    ("alias", "kernel _copy: output 'dst' overlaps argument 'src' in memory"),
    ("undeclared", "kernel _copy: tensor argument 'src' is neither an output nor read-only"),
    ("both", "kernel _copy: tensor argument 'dst' is both an output and read-only"),
])
def test_each_wrong_launch_is_caught_by_name(case, message):
    buf = torch.arange(200.0, device=DEV)
    src, dst = torch.arange(100.0, device=DEV), torch.zeros(100, device=DEV)
    grid, tiles, reads = (4,), {"dst": Tiles((32,), (0,))}, ("src",)
    if case == "uncovered":
        grid = (3,)
    elif case == "overlap":
        grid = (4, 2)
    elif case == "alias":
        src, dst = buf[:100], buf[50:150]
    elif case == "undeclared":
        reads = ()
    elif case == "both":
        reads = ("src", "dst")
    with pytest.raises(LaunchError) as e:
        launch(_copy, grid, dict(src=src, dst=dst, n=100), tiles, reads, BLOCK=32)
    assert str(e.value) == message


def test_a_kernel_that_writes_a_read_only_input_is_caught():
    src, dst = torch.arange(100.0, device=DEV), torch.zeros(100, device=DEV)
    with pytest.raises(LaunchError, match="kernel _scribble: read-only argument 'src' changed"):
        launch(_scribble, (4,), dict(src=src, dst=dst, n=100), {"dst": Tiles((32,), (0,))}, ("src",), BLOCK=32)


# ---- attention over pages and the KV write ----

def _step(lens_new: list[tuple[int, int]], bs: int = 16, num_blocks: int = 40, seed: int = 0):
    """Sequences of (cached, new) tokens on scrambled blocks -> (metadata, T)."""
    free = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(seed)).tolist()
    qsl, seq_lens, tables, slots = [0], [], [], []
    for cached, new in lens_new:
        ctx = cached + new
        table = [free.pop() for _ in range(-(-ctx // bs))]
        slots += [table[p // bs] * bs + p % bs for p in range(cached, ctx)]
        qsl.append(qsl[-1] + new)
        seq_lens.append(ctx)
        tables.append(table)
    return AttentionMetadata(qsl, seq_lens, tables, torch.tensor(slots, dtype=torch.long), bs), qsl[-1]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("window, softcap", [(0, 0.0), (7, 0.0), (0, 20.0)], ids=["causal", "window", "softcap"])
@pytest.mark.parametrize("shape", [[(30, 1), (0, 1), (47, 1)], [(0, 37)], [(20, 13), (33, 1)], [(20, 40), (33, 1), (5, 17)]],
                         ids=["decodes", "prefill", "mixed", "chunks-and-decodes"])
def test_paged_attention_equals_the_torch_twin(shape, window, softcap, dtype, monkeypatch):
    """Rows of sequences with 16 new tokens or more in the flash tiles, the others row by row."""
    from hearth.kernels.gpu import paged_attention as module

    kernels = []
    monkeypatch.setattr(module, "launch", lambda k, *a, **kw: kernels.append(k) or launch(k, *a, **kw))
    heads, kv_heads, d, bs = (9, 3, 32, 16) if dtype == torch.bfloat16 else (4, 2, 32, 16)  # 3 kv heads: SmolLM2's
    meta, T = _step(shape, bs)
    g = torch.Generator().manual_seed(1)
    cache = torch.randn(2, 40, bs, kv_heads, d, generator=g).to(dtype)
    for i, (ctx, table) in enumerate(zip(meta.seq_lens, meta.block_tables)):  # stale slots past each context: inf
        last = table[-1]
        cache[:, last, ctx % bs or bs:] = float("inf")
    q = torch.randn(T, heads, d, generator=g)
    ours = paged_attention(q.to(DEV), cache.to(DEV), meta, 0.17, window, softcap).cpu()
    ref = paged_attention_torch(q, cache, meta, 0.17, window, softcap)
    assert (ours - ref).abs().max() < 1e-5
    flash = sum(n >= module.FLASH_MIN_ROWS for _, n in shape)
    assert kernels.count(module.flash_prefill_kernel) == flash
    assert (module.paged_attention_kernel in kernels) == (flash < len(shape))


@pytest.mark.parametrize("kv_heads", [2, 3])  # 3: SmolLM2's
def test_kv_write_equals_the_torch_twin(kv_heads):
    meta, T = _step([(5, 9), (0, 1)])
    kv = torch.randn(T, 2, kv_heads, 32)
    ours, ref = (torch.zeros(2, 40, 16, kv_heads, 32, dtype=torch.float16) for _ in range(2))
    ours = ours.to(DEV)
    write_kv(ours, kv.to(DEV), meta)
    ours = ours.cpu()
    write_kv_pair_torch(ref, kv, meta)
    assert torch.equal(ours, ref) and ours.abs().sum() > 0


def test_a_scatter_to_one_slot_twice_is_caught():
    meta, T = _step([(0, 3)])
    meta.slot_mapping[2] = meta.slot_mapping[0]
    with pytest.raises(LaunchError, match=r"kernel kv_write_kernel: output 'cache': its rows overlap \('slots' names row \d+ twice\)"):
        write_kv(torch.zeros(2, 40, 16, 2, 32, device=DEV), torch.randn(T, 2, 2, 32, device=DEV), meta)


# ---- norms and rope ----

def test_rms_norm_equals_the_torch_twin():
    x, w = torch.randn(5, 96), torch.randn(96)
    for dtype in (torch.float32, torch.bfloat16):
        ref = RMSNorm(w, 1e-6)
        ref.out_dtype = dtype
        ours, want = rms_norm(x.to(DEV), ref.weight.to(DEV), 1e-6, dtype).cpu(), ref(x).float()
        ulp = 2.0 ** -23 if dtype == torch.float32 else 2.0 ** -7  # f32 sums in another order: a rounding apart
        assert ours.dtype == dtype and bool(((ours.float() - want).abs() <= 4 * ulp * want.abs() + 1e-6).all())


@pytest.mark.parametrize("norm", [False, True], ids=["rope", "norm+rope"])
@pytest.mark.parametrize("neox, rot", [(True, 32), (False, 32), (True, 16)], ids=["halves", "pairs", "partial"])
def test_qk_norm_rope_equals_the_torch_twin(neox, rot, norm):
    T, heads, d = 6, 5, 32
    g = torch.Generator().manual_seed(2)
    y = torch.randn(T, heads * d + 7, generator=g)  # a wider row: q | k is a strided view of it
    rest = y[:, heads * d:].clone()
    qk = y[:, :heads * d].view(T, heads, d)
    positions = torch.tensor([0, 3, 4, 9, 100, 2047])
    rope, memo = Rotary(rot, 10000.0, neox), {}
    weight = torch.randn(heads, d, generator=g) if norm else None
    ref = qk.clone()
    if norm:
        RMSNorm(weight, 1e-6)(ref, out=ref)
    rope(ref, positions, memo)
    cos, sin = rope.halves(positions, memo)
    y_dev = y.to(DEV)
    qk_dev = y_dev[:, :heads * d].view(T, heads, d)
    qk_norm_rope(qk_dev, cos.to(DEV), sin.to(DEV), neox, rot, None if weight is None else weight.to(DEV), 1e-6)
    y = y_dev.cpu()
    qk = y[:, :heads * d].view(T, heads, d)
    assert (qk - ref).abs().max() < 1e-5
    assert torch.equal(y[:, heads * d:], rest)  # the rest of the row untouched


# ---- token trees (speculative decoding) ----

@pytest.mark.parametrize("case", TREE_CASES, ids=lambda c: f"h{c[0]}kv{c[1]}d{c[2]}b{c[3]}w{c[4]}c{c[5]:g}bs{c[6]}")
def test_tree_rows_match_the_torch_twin_and_a_decode_of_their_path(case):
    """A node row sees the keys before the tree and its ancestors' (the torch twin's ancestor-only mask),
    and is bit for bit the row-wise kernel's decode of its path (its ancestors' K/V moved to the path's
    positions): the same keys in the same blocks and order."""
    heads, kvh, d, base, window, softcap, bs = case
    g = torch.Generator().manual_seed(base + d)
    meta = tree_meta(base, PARENTS, bs, g)
    cache = torch.randn(2, 512, bs, kvh, d, generator=g).to(torch.float16)
    q = torch.randn(meta.query_start_loc[-1], heads, d, generator=g)
    scale = d ** -0.5 * 3
    got = paged_attention(q.to(DEV), cache.to(DEV), meta, scale, window, softcap).cpu()
    want = paged_attention_torch(q, cache, fresh(meta), scale, window, softcap)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=0)
    _, qpos, paths = meta.tree_paths(0)
    flat, table = cache.view(2, -1, kvh, d), meta.block_tables[0]
    slot = lambda p: table[p // bs] * bs + p % bs  # noqa: E731
    for c in (0, 4, len(paths) - 1):  # a first-level node, a middle one, the deepest
        moved = cache.clone()
        for depth, a in enumerate(paths[c]):
            moved.view(2, -1, kvh, d)[:, slot(base + depth)] = flat[:, slot(base + a)]
        ctx = base + len(paths[c])
        dmeta = AttentionMetadata([0, 1, 2], [ctx, meta.seq_lens[1]], [table, meta.block_tables[1]],
                                  torch.tensor([slot(ctx - 1), 0]), bs)
        one = paged_attention(q[[1 + c, len(q) - 1]].contiguous().to(DEV), moved.to(DEV), dmeta, scale, window, softcap).cpu()
        assert torch.equal(one[0], got[1 + c]), f"node {c} (path {paths[c]}) differs from a decode of its path"


def test_a_tree_of_sixteen_rows_or_more_stays_row_wise(monkeypatch):
    """A tree's rows never take the flash tiles (which know no ancestor masks), however many."""
    from hearth.kernels.gpu import paged_attention as module

    kernels = []
    monkeypatch.setattr(module, "launch", lambda k, *a, **kw: kernels.append(k) or launch(k, *a, **kw))
    parents = [-1] + list(range(17))  # a chain of 18 nodes: 19 rows with the next token's
    meta = tree_meta(40, parents, 16, torch.Generator().manual_seed(3), others=0)
    cache = torch.randn(2, 512, 16, 2, 32).to(torch.float16)
    q = torch.randn(meta.query_start_loc[-1], 4, 32)
    got = paged_attention(q.to(DEV), cache.to(DEV), meta, 0.2).cpu()
    torch.testing.assert_close(got, paged_attention_torch(q, cache, fresh(meta), 0.2), atol=2e-5, rtol=0)
    assert kernels == [module.paged_attention_kernel]
