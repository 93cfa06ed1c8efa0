"""csrc/delta_net.h's hk_delta_net (hearth.backends.cpu_delta_net) against its torch twin
(hearth.layers.delta_mixer.delta_mix_torch): the same mixer output and the same windows and states after a step,
for decode batches, prompt chunks (token by token and the chunked form's lengths) and both mixed, with more value
than key heads (the converter's tiled order) and slots in a scrambled order."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from hearth.backends.cpu_delta_net import delta_mix_native
from hearth.config import RecurrentShape
from hearth.kernels import native, tiers
from hearth.kvstore.recurrent import StepStates
from hearth.layers.delta_mixer import delta_mix_torch
from hearth.layers.norm import RMSNorm

pytestmark = pytest.mark.skipif(not native.has("delta_net"), reason="no native kernels with hk_delta_net here")

TOL = 1e-5  # f32 rounding of two orders of summation (as tests/layers/test_delta_rule.py; measured 8e-7 at 40 rows)
SHAPE = RecurrentShape(k_heads=2, v_heads=4, k_dim=16, v_dim=32, conv_kernel=4)


@dataclass
class Layer:
    """What the mixer reads of a DeltaNetLayer."""
    shape: RecurrentShape
    eps: float
    conv_w: torch.Tensor
    a: torch.Tensor
    dt: torch.Tensor
    head_norm: RMSNorm
    index: int = 0


@dataclass
class Meta:
    query_start_loc: list[int]
    is_decode: bool
    recurrent: StepStates


class States:
    """RecurrentStates' two dicts for one layer."""

    def __init__(self, conv: torch.Tensor, delta: torch.Tensor):
        self.conv, self.delta = {0: conv}, {0: delta}


def _layer(r: RecurrentShape, g: torch.Generator) -> Layer:
    return Layer(r, 1e-6, 0.5 * torch.randn(r.conv_channels, r.conv_kernel, generator=g),
                 -torch.empty(r.v_heads).uniform_(0.02, 1, generator=g), torch.randn(r.v_heads, generator=g),
                 RMSNorm(1 + 0.2 * torch.randn(r.v_dim, generator=g), 1e-6))


def _run(mix, layer: Layer, proj: torch.Tensor, lens: list[int], slots: list[int], conv, delta):
    r = layer.shape
    conv, delta = conv.clone(), delta.clone()
    qkv, z, beta, alpha = proj.split([r.conv_channels, r.v_heads * r.v_dim, r.v_heads, r.v_heads], dim=-1)
    qsl = [0]
    for n in lens:
        qsl.append(qsl[-1] + n)
    meta = Meta(qsl, all(n == 1 for n in lens), StepStates(States(conv, delta), slots))
    return mix(layer, qkv, z, beta, alpha, meta), conv, delta


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.mark.parametrize("lens", [[1], [1, 1, 1], [5], [40], [70, 1, 3], [1, 17]])
def test_the_native_mixer_equals_torchs(lens):
    g = torch.Generator().manual_seed(len(lens) * 100 + sum(lens))
    r, layer = SHAPE, _layer(SHAPE, torch.Generator().manual_seed(1))
    width = r.conv_channels + r.v_heads * r.v_dim + 2 * r.v_heads
    proj = torch.randn(sum(lens), width, generator=g)
    slots = [4, 1, 3][:len(lens)]
    conv = torch.randn(5, r.conv_channels, r.conv_kernel - 1, generator=g)  # states already running
    delta = 0.3 * torch.randn(5, r.v_heads, r.k_dim, r.v_dim, generator=g)
    y0, c0, d0 = _run(delta_mix_torch, layer, proj, lens, slots, conv, delta)
    y1, c1, d1 = _run(delta_mix_native, layer, proj, lens, slots, conv, delta)
    assert _rel(y1, y0) < TOL
    assert torch.equal(c1, c0)  # the windows are copies of inputs: exact
    assert _rel(d1, d0) < TOL
    untouched = [i for i in range(5) if i not in slots]
    assert torch.equal(d1[untouched], delta[untouched]) and torch.equal(c1[untouched], conv[untouched])


def test_a_prompt_in_one_call_equals_it_token_by_token():
    """Each sequence's rows run in order on its state: a chunk and its tokens one call each agree."""
    g = torch.Generator().manual_seed(7)
    r, layer = SHAPE, _layer(SHAPE, g)
    proj = torch.randn(9, r.conv_channels + r.v_heads * r.v_dim + 2 * r.v_heads, generator=g)
    conv, delta = torch.zeros(1, r.conv_channels, r.conv_kernel - 1), torch.zeros(1, r.v_heads, r.k_dim, r.v_dim)
    whole, cw, dw = _run(delta_mix_native, layer, proj, [9], [0], conv, delta)
    rows = []
    for t in range(9):
        y, conv, delta = _run(delta_mix_native, layer, proj[t:t + 1], [1], [0], conv, delta)
        rows.append(y)
    assert torch.equal(torch.cat(rows), whole) and torch.equal(delta, dw) and torch.equal(conv, cw)


def test_the_cpu_backend_takes_the_native_mixer_and_torchs_stays_the_twin():
    from hearth.backends import select
    from hearth.backends.base import Backend

    assert select("cpu").delta_mixer(None) is delta_mix_native
    assert Backend().delta_mixer(None) is delta_mix_torch


@pytest.mark.parametrize("tier", [t for t in ("avx512", "avx2", "neon") if tiers.why_not(t) is None])
def test_every_tier_the_machine_runs_equals_torch(tier):
    """Each tier's library compiles delta_net.h with its own flags (its own vector width): each is checked."""
    so = native.open_tier(tier)

    def mix(layer, qkv, z, beta, alpha, meta):
        step = meta.recurrent
        windows, states = step.layer(layer.index)
        return native.delta_net(qkv, z, beta, alpha, torch.tensor(meta.query_start_loc), torch.tensor(step.slots),
                                windows, states, layer.conv_w, layer.a, layer.dt, layer.head_norm.weight, layer.eps,
                                layer.shape.k_heads, so=so)

    g = torch.Generator().manual_seed(3)
    r, layer = SHAPE, _layer(SHAPE, g)
    lens, slots = [20, 1], [2, 0]
    proj = torch.randn(sum(lens), r.conv_channels + r.v_heads * r.v_dim + 2 * r.v_heads, generator=g)
    conv, delta = torch.randn(3, r.conv_channels, r.conv_kernel - 1), torch.randn(3, r.v_heads, r.k_dim, r.v_dim)
    y0, c0, d0 = _run(delta_mix_torch, layer, proj, lens, slots, conv, delta)
    y1, c1, d1 = _run(mix, layer, proj, lens, slots, conv, delta)
    assert _rel(y1, y0) < TOL and torch.equal(c1, c0) and _rel(d1, d0) < TOL
