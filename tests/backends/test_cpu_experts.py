"""A MoE block's experts in one native call over the stacked tensors (hearth.backends.cpu_experts,
csrc/moe.h) on every tier this CPU runs (each native library loaded beside the selected one, and the
torch tier's op-by-op experts): against the exact twin (gguf-py's dequantization, an f64 SwiGLU per
chosen expert), and against the op-by-op experts (hearth.layers.experts) over the same tier's GEMVs.

Bounds: the op-by-op experts run the same GEMVs on the same 8-bit activations; only act(gate) * up
differs (csrc's act_ps vs torch's silu, ~1 ulp), which can move one down-projection activation code:
measured <= 1.1e-7 of max|out|, held to 1e-5. Against the exact twin the 8-bit activations' error,
measured <= 1.1e-2 of max|out| on these random blocks, held to 3e-2 (test_moe's CPU-vs-torch bound: 4e-2)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType as Q
from torch import nn

from hearth.backends import select
from hearth.backends.base import Backend
from hearth.backends.cpu_experts import NativeExperts
from hearth.kernels import native, tiers
from hearth.layers.experts import Experts
from hearth.layers.quant import as_bytes
from hearth.loader.gguf_loader import GGUFFile, GGUFTensor
from hearth.models.registry import load_model
from tests.gguf_factory import write_tiny_gguf
from tests.layers.test_quant import gguf_reference, random_tensor

NATIVE_TIERS = [t for t in ("avx512", "avx2") if tiers.why_not(t) is None]
TIERS = [*NATIVE_TIERS, "torch"]
OP_BY_OP_TOL, EXACT_TOL = 1e-5, 3e-2
E, HIDDEN, INTER = 6, 256, 512


def stacked(qtype: Q, e: int, n: int, k: int, rng) -> GGUFTensor:
    """[e, n, k] as the loader hands out a stacked expert tensor: every expert its own random blocks."""
    return GGUFTensor("w_exps", qtype, (e, n, k), np.stack([random_tensor(qtype, n, k, rng).data for _ in range(e)]))


class TierLinear(nn.Module):
    """A native linear on another tier's library (the op-by-op experts' linears at that tier)."""

    def __init__(self, ts, so, bias=None):
        super().__init__()
        ts = ts if isinstance(ts, list) else [ts]
        self.mm = native.NativeMatmul([(as_bytes(t.data, t.qtype), int(t.qtype)) for t in ts], ts[0].shape[1], 64, so)

    def forward(self, x):
        return self.mm(x)


def experts_at(tier: str, gate, up, down) -> tuple[nn.Module, nn.Module]:
    """(the fast experts, the op-by-op ones) at `tier`: torch's has only the op-by-op experts."""
    if tier == "torch":
        ref = Backend().experts([gate, up], down, "silu")
        return ref, ref
    so = native.open_tier(tier)
    return (NativeExperts(gate, up, down, "silu", 64, so),
            Experts(lambda ts, bias: TierLinear(ts, so), [gate, up], down, "silu"))


def exact(gate, up, down, h, weights, ids) -> torch.Tensor:
    """sum_j weights[t, j] * down_e(silu(gate_e h[t]) * up_e h[t]) in f64 on the dequantized blocks."""
    g, u, d = (torch.from_numpy(gguf_reference(t)).double() for t in (gate, up, down))
    out = torch.zeros(h.shape, dtype=torch.float64)
    for t in range(h.shape[0]):
        x = h[t].double()
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            out[t] += float(weights[t, j]) * (d[e] @ (F.silu(g[e] @ x) * (u[e] @ x)))
    return out


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_K, Q.Q6_K], ids=lambda q: q.name)
def test_experts_equal_op_by_op_and_the_exact_twin(tier, qtype):
    """A decode row, a few rows (the GEMV per expert), a batch (the batch GEMMs for some experts) and a
    prefill-sized one with every expert used (the prefill GEMMs); k = 1 and k = E; the router's order
    (descending weight, not ascending id) as topk hands it."""
    rng, g = np.random.default_rng(int(qtype)), torch.Generator().manual_seed(int(qtype))
    gate, up, down = stacked(qtype, E, INTER, HIDDEN, rng), stacked(qtype, E, INTER, HIDDEN, rng), \
        stacked(qtype, E, HIDDEN, INTER, rng)
    fast, op = experts_at(tier, gate, up, down)
    for rows, k in ((1, 2), (1, 1), (1, E), (5, 2), (37, 3), (100, E), (70, 1)):
        h = torch.randn(rows, HIDDEN, generator=g)
        weights, ids = torch.softmax(torch.randn(rows, E, generator=g), -1).topk(k, dim=-1)
        ours = fast(h, weights, ids)
        assert ours.shape == (rows, HIDDEN) and ours.dtype == torch.float32
        assert rel(ours, op(h, weights, ids)) <= OP_BY_OP_TOL, (rows, k)
        assert rel(ours, exact(gate, up, down, h, weights, ids)) <= EXACT_TOL, (rows, k)


@pytest.mark.parametrize("tier", NATIVE_TIERS)
def test_each_row_is_its_own_and_ids_out_of_range_are_refused(tier):
    """A row's output does not depend on the other rows of the call (grouping by expert gathers and
    scatters rows) beyond the matmul regime its expert's row count picks; an id past the experts is an
    IndexError, out untouched."""
    rng, g = np.random.default_rng(1), torch.Generator().manual_seed(1)
    gate, up, down = stacked(Q.Q8_0, E, INTER, HIDDEN, rng), stacked(Q.Q8_0, E, INTER, HIDDEN, rng), \
        stacked(Q.Q8_0, E, HIDDEN, INTER, rng)
    fast, _ = experts_at(tier, gate, up, down)
    h = torch.randn(6, HIDDEN, generator=g)
    weights, ids = torch.softmax(torch.randn(6, E, generator=g), -1).topk(2, dim=-1)
    whole = fast(h, weights, ids)
    for t in range(6):  # a row alone: the same GEMV (every expert gets < 10 rows here), the same bits
        assert torch.equal(fast(h[t:t + 1], weights[t:t + 1], ids[t:t + 1])[0], whole[t])
    with pytest.raises(IndexError, match=r"expert id out of range \[0, 6\)"):
        fast(h, weights, ids.clone().fill_(E))


@pytest.fixture(scope="module")
def moe_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("moe-native") / "moe.gguf"
    write_tiny_gguf(path, "qwen3moe", qtype="Q8_0", experts=8, experts_used=2, expert_ffn=64)
    return path


def block_pair(path, tier: str | None = None):
    """One MoE block of the CPU backend and the same block with the op-by-op experts on the same linears
    (tier: both experts on that tier's library instead of the selected one's); the file they read."""
    g = GGUFFile(path)
    backend = select("cpu")
    fast = load_model(g, backend)[0].layers[0].mlp
    ref = load_model(g, backend)[0].layers[0].mlp
    stacks = [g.tensor(f"blk.0.ffn_{w}_exps.weight") for w in ("gate", "up", "down")]
    if tier is None:
        ref.experts = Backend.experts(backend, stacks[:2], stacks[2], "silu")
    else:
        fast.experts, ref.experts = experts_at(tier, *stacks)
    return fast, ref, g


@pytest.mark.skipif(not native.has("linear"), reason="the torch tier: no native experts")
def test_the_cpu_backend_holds_two_plans_per_layer_not_linears_per_expert(moe_file):
    fast, ref, g = block_pair(moe_file)
    assert type(fast.experts) is NativeExperts and not list(fast.experts.children())
    assert len(ref.experts.gate_up) == len(ref.experts.down) == 8  # the op-by-op twin: two linears per expert
    t = g.tensor("blk.0.ffn_down_exps.weight")
    down, raw = fast.experts.down.weights, as_bytes(t.data, t.qtype)
    assert len(down) == 1 and torch.equal(down[0], raw)  # the file's bytes, every expert's in one tensor


@pytest.mark.parametrize("tier", NATIVE_TIERS)
@pytest.mark.parametrize("renorm", [True, False])
@pytest.mark.parametrize("k", [1, 2, 8])
def test_the_block_with_ties_renorm_and_every_k(moe_file, tier, renorm, k):
    """The whole block (routing shared) on a decode row and on a batch, with the router's top-k
    renormalized or not, k = 1 .. every expert, and exact ties: experts 0 and 5 given one router row, so
    each row's probabilities tie between them; both paths take torch's one topk, so the same experts."""
    fast, ref, _ = block_pair(moe_file, tier)
    router = fast.router.clone()
    router[5] = router[0]
    for b in (fast, ref):
        b.router, b.top_k, b.renorm = router, k, renorm
    h = torch.randn(12, router.shape[1], generator=torch.Generator().manual_seed(k))
    weights, ids = fast.route(h)
    assert torch.allclose(weights.sum(-1), torch.ones(12)) == (renorm or k == 8)
    logits = h @ router.T
    assert torch.equal(logits[:, 0], logits[:, 5])  # the tie is exact
    for rows in (h, h[:1]):
        assert rel(fast(rows), ref(rows)) <= OP_BY_OP_TOL
