"""qwen35moe (Qwen3.5-MoE: hearth.models.qwen35's layers over hearth.models.moe_shared) against transformers'
Qwen3_5MoeForCausalLM on a tiny random file written as llama.cpp's converter writes it (tests/qwen35_factory.py):
prefill logits, and greedy text of prompts batched through the engine with chunked prefill and preemption."""

from __future__ import annotations

import pytest
import torch

from hearth import LLM, SamplingParams
from hearth.backends import select
from hearth.layers.linear import use_linear_policy
from hearth.loader.gguf_loader import GGUFFile
from hearth.models.registry import load_model
from tests.models.test_logits_vs_transformers import REL_TOL, prompt, rel_err
from tests.models.test_qwen35 import Driver
from tests.qwen35_factory import DIMS, EXPERTS, hf_qwen35, write_qwen35_gguf


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    hf = hf_qwen35(seed=2, moe=EXPERTS)
    path = write_qwen35_gguf(tmp_path_factory.mktemp("qwen35moe") / "tiny-qwen35moe.gguf", hf, moe=EXPERTS)
    return hf, path


def test_prefill_logits_equal_transformers(tiny):
    hf, path = tiny
    with use_linear_policy(exact=True):
        model, cfg = load_model(GGUFFile(path), select())
    assert (cfg.num_experts, cfg.experts_used, cfg.expert_ffn, cfg.intermediate_size) == (4, 2, 32, 0)
    assert type(model.layers[0].mlp).__name__ == type(model.layers[3].mlp).__name__ == "SharedExpertMoE"
    ids = prompt(DIMS.vocab)
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    assert rel_err(Driver(model, cfg).step({"a": ids})["a"], ref) < REL_TOL


def test_greedy_batched_with_chunks_and_preemption_equals_transformers(tiny):
    hf, path = tiny
    prompts = [prompt(DIMS.vocab, n=n, seed=n) for n in (4, 17, 30)]
    with torch.no_grad():
        want = [hf.generate(torch.tensor([p]), max_new_tokens=10, min_new_tokens=10, do_sample=False)[0, len(p):]
                .tolist() for p in prompts]
    with use_linear_policy(exact=True):
        llm = LLM(str(path), progress=False, num_kv_blocks=6, block_size=8, max_num_batched_tokens=9)
    params = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
    got = [list(o.outputs[0].token_ids) for o in llm.generate([{"prompt_token_ids": p} for p in prompts], params)]
    assert got == want and llm.engine.scheduler.num_preemptions > 0


def test_the_backends_paths_run(tiny):
    """The backend's linears and experts as hearth runs them (the CPU's native experts where the library has
    them): greedy through the engine, batched."""
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    outs = LLM(str(tiny[1]), progress=False).generate([{"prompt_token_ids": prompt(DIMS.vocab, n=n)} for n in (3, 20)],
                                                       params)
    assert [len(o.outputs[0].token_ids) for o in outs] == [6, 6]
