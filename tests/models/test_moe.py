"""Mixture of experts (qwen3moe) beyond the logits: each expert reads its own rows of the stacked GGUF
tensor; the engine generates greedily with the experts' layers op by op, each decoded token the
argmax of one prefill over the same text; the planner counts every expert's weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf.quants import dequantize

from hearth import LLM, SamplingParams
from hearth.backends import select
from hearth.errors import UnsupportedError
from hearth.loader.gguf_loader import GGUFFile, expert_views
from hearth.memory.planner import plan
from hearth.memory.request import build_request
from hearth.memory.weights import decode_weight_bytes
from hearth.models.registry import load_model
from tests.gguf_factory import write_tiny_gguf
from tests.models.test_logits_vs_transformers import PagedDriver, prompt


@pytest.fixture(scope="module")
def moe_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("moe") / "tiny-qwen3moe.gguf"
    write_tiny_gguf(path, "qwen3moe", qtype="Q8_0")
    return path


def test_each_expert_is_its_own_rows_of_the_stacked_tensor(moe_file):
    t = GGUFFile(moe_file).tensor("blk.1.ffn_down_exps.weight")  # [experts, hidden, expert_ffn]
    whole = dequantize(t.data, t.qtype).reshape(t.shape)
    views = expert_views(t)
    assert [v.shape for v in views] == [t.shape[1:]] * t.shape[0]
    for e, v in enumerate(views):
        assert np.shares_memory(v.data, t.data)  # a view of the file, no copy
        np.testing.assert_array_equal(dequantize(v.data, v.qtype).reshape(v.shape), whole[e])


def test_greedy_generation_is_the_argmax_of_one_prefill(moe_file):
    ids = prompt(300, n=9)
    llm = LLM(str(moe_file), progress=False)
    out = llm.generate([{"prompt_token_ids": ids}], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
    new = list(out[0].outputs[0].token_ids)
    assert len(new) == 8
    model, cfg = load_model(GGUFFile(moe_file), select())  # the backend LLM chose, the same linears
    logits = PagedDriver(model, cfg).step({"a": ids + new[:-1]})["a"][len(ids) - 1:]  # [8, vocab]
    assert logits.argmax(-1).tolist() == new
    assert (logits.topk(2).values.diff(dim=-1).abs() > 1e-3).all()  # no near tie decided that


def test_speculation_asked_for_is_off_and_says_why(moe_file, caplog):
    """A verify row is not a decode row bit for bit in a MoE model (an expert's matmul regime follows how
    many rows chose it), so drafts would not be lossless: off, with the reason, and generation goes on."""
    with caplog.at_level("WARNING", logger="hearth"):
        llm = LLM(str(moe_file), progress=False, speculative_config={"method": "ngram"})
    assert "speculative decoding is off: in a MoE model (its experts' matmuls depend on how many rows chose them) " \
        "a verify row is not computed bit for bit as a decode row" in caplog.text
    out = llm.generate(["a b a b a b"], SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == 6


def test_the_plan_counts_every_expert_and_reads_the_used_ones(moe_file):
    req = build_request(str(moe_file), device="H100 SXM", ctx=128, concurrency=1, kv_cache_dtype="f16",
                        batch_tokens=64)
    p = plan(req)  # `hearth plan`'s figures
    g = GGUFFile(moe_file)
    assert (req.shape.num_experts, req.shape.active_experts, req.shape.expert_ffn) == (4, 2, 96)
    assert p["weight_bytes"] == sum(t.data.nbytes for t in g.tensors.values())
    experts = sum(t.data.nbytes for n, t in g.tensors.items() if "_exps." in n)
    # a decode step reads its 2 of 4 experts; the token embedding is the tied head, read whole
    assert decode_weight_bytes(req.tensors, req.shape, 1) == p["weight_bytes"] - experts / 2


@pytest.mark.parametrize("used", [0, 5])
def test_a_file_with_bad_expert_counts_is_one_clear_error(tmp_path, used):
    path = tmp_path / "bad.gguf"
    write_tiny_gguf(path, "qwen3moe", experts_used=used)
    with pytest.raises(UnsupportedError, match=r"qwen3moe.expert_used_count \(at most expert_count\); the file has 4 and"):
        load_model(GGUFFile(path), select())


@pytest.mark.parametrize("arch", ["qwen3moe", "llama"])  # llama: Mixtral's experts in a llama file
def test_the_cpu_backends_experts_are_the_torch_backends(tmp_path, arch):
    """Q8_0 experts on the CPU backend's native GEMVs against the torch backend's, one MoE block fed the
    same rows (so one routing: a whole model's logits would let rounding flip a router's near tie, a
    whole expert apart, on some CPU); many rows and one row (decode's direct path)."""
    path = tmp_path / "moe.gguf"
    write_tiny_gguf(path, arch, qtype="Q8_0", **({} if arch == "qwen3moe" else
                                                  {"experts": 4, "experts_used": 2, "expert_ffn": 32}))
    blocks = [load_model(GGUFFile(path), select(device))[0].layers[0].mlp for device in ("torch", "cpu")]
    h = torch.randn(12, blocks[0].router.shape[1], generator=torch.Generator().manual_seed(0))
    for rows in (h, h[:1]):
        ref, ours = (b(rows) for b in blocks)
        assert ((ours - ref).abs().max() / ref.abs().max()).item() < 0.04
