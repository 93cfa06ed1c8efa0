"""A MoE layer on the CPU backend (hearth.backends.cpu.NativeMoeLayerOps): attention's steps fused around
its native linears as a dense layer's, the experts one native call; no whole-layer call, no one-call
stack, and no row regimes claimed (an expert's rows take the GEMV or the batch GEMMs by how many rows of
the step chose it, so a row's bits depend on the other rows).

Its steps against the torch ops over the same linears: the MLP step (torch's norm and routing, the same
experts) bit for bit; q|k|v and the output projection as a dense layer's native steps, whose f32 input
the torch ops round to bf16 first (measured 0.3-0.55% of the largest output here), held to 1e-2. The whole
model is not compared: that bf16 rounding flips a router's near tie on these tiny random files (layer 0's
second and third experts 3e-5 apart at one row), a whole expert apart."""

from __future__ import annotations

import pytest
import torch

from hearth.backends import select
from hearth.backends.base import TORCH_OPS
from hearth.backends.cpu import NativeMoeLayerOps
from hearth.kernels import native
from hearth.loader.gguf_loader import GGUFFile
from hearth.models.registry import load_model
from tests.gguf_factory import write_tiny_gguf

pytestmark = pytest.mark.skipif(not native.has("fused_ops"), reason="no native layer ops at this CPU tier")


@pytest.fixture(scope="module", params=["qwen3moe", "llama"])  # llama: Mixtral's experts in a llama file
def model(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("moe-layer") / "moe.gguf"
    write_tiny_gguf(path, request.param, qtype="Q8_0", **({} if request.param == "qwen3moe" else
                                                         {"experts": 4, "experts_used": 2, "expert_ffn": 32}))
    return load_model(GGUFFile(path), select("cpu"))[0]


def test_moe_layers_run_native_steps_and_claim_no_row_regimes(model):
    backend = select("cpu")
    assert all(type(layer.ops) is NativeMoeLayerOps for layer in model.layers)
    assert backend.row_regimes(model, False) is None and backend.stack(model.layers) is None


@pytest.mark.parametrize("rows", [1, 10])
def test_the_steps_equal_the_torch_ops_over_the_same_linears(model, rows):
    layer, g = model.layers[0], torch.Generator().manual_seed(rows)
    ops = layer.ops.for_rows(rows)
    assert ops is layer.ops
    x = torch.randn(rows, layer.attn_norm.weight.shape[0], generator=g)
    attn = torch.randn(rows, layer.attn.q_size, generator=g)

    def rel(a, b):
        return float((a - b).abs().max() / b.abs().max())

    assert torch.equal(ops.mlp_add(layer, x.clone()), TORCH_OPS.mlp_add(layer, x.clone()))
    assert rel(ops.qkv(layer, x), TORCH_OPS.qkv(layer, x)) < 1e-2
    added = ops.out_add(layer, attn, x.clone()) - x  # what the projection adds
    assert rel(added, TORCH_OPS.out_add(layer, attn, x.clone()) - x) < 1e-2
