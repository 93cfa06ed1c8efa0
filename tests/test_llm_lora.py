"""LoRA adapters through the engine (LLM(lora=[(path, scale)]), llama-server's --lora-scaled): the global
scale runs the merged model, a request's own `lora` replaces it for that request only, requests with
different scales share steps, and the prefix cache never hands one adapter's K/V to another."""

from __future__ import annotations

import pytest

from hearth import SamplingParams
from hearth.errors import HearthError
from hearth.layers.linear import use_linear_policy
from hearth.llm import LLM
from hearth.sampling_params import InvalidSamplingParams
from tests.gguf_factory import write_tiny_gguf
from tests.lora_factory import merged, write_lora_gguf
from tests.models.test_lora import ALPHA, RANK, targets

PROMPT = {"prompt_token_ids": [5, 17, 99, 230, 41, 8, 77, 150, 12, 64, 3, 201, 88, 19, 7, 33, 120, 2]}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("llm-lora")
    write_tiny_gguf(d / "base.gguf", "llama")
    pairs = write_lora_gguf(d / "adapter.gguf", d / "base.gguf", targets("llama"), RANK, ALPHA)
    write_tiny_gguf(d / "merged.gguf", "llama", adjust=merged(pairs, 1.0, ALPHA))
    return d


def make(path, **kw) -> LLM:
    with use_linear_policy(exact=True):  # f32 everywhere: the merged file's greedy tokens are the adapter's
        return LLM(str(path), max_model_len=128, block_size=4, progress=False, **kw)


@pytest.fixture(scope="module")
def runs(files):
    """Greedy tokens of the base and the merged model."""
    greedy = SamplingParams(temperature=0, max_tokens=8)
    return {name: make(files / f"{name}.gguf").generate(PROMPT, greedy)[0].outputs[0].token_ids
            for name in ("base", "merged")}


def greedy(**kw) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=8, **kw)


def test_global_and_per_request_scales(files, runs):
    assert runs["base"] != runs["merged"]  # the adapter changes the answer
    llm = make(files / "base.gguf", lora=[(str(files / "adapter.gguf"), 1.0)])
    outs = llm.generate([PROMPT, PROMPT, PROMPT], [greedy(), greedy(lora={0: 0.0}), greedy(lora={})])
    assert [o.outputs[0].token_ids for o in outs] == [runs["merged"], runs["base"], runs["base"]]
    llm.lora.set_scales({})  # POST /lora-adapters with no entry: every adapter at 0, as llama-server
    assert llm.generate(PROMPT, greedy())[0].outputs[0].token_ids == runs["base"]
    assert llm.generate(PROMPT, greedy(lora={0: 1.0}))[0].outputs[0].token_ids == runs["merged"]


def test_prefix_cache_is_keyed_by_the_adapter_scales(files, runs):
    llm = make(files / "base.gguf", lora=[(str(files / "adapter.gguf"), 0.0)])
    first = llm.generate(PROMPT, greedy(lora={0: 1.0}))[0]
    assert first.outputs[0].token_ids == runs["merged"] and first.num_cached_tokens == 0
    other = llm.generate(PROMPT, greedy())[0]  # the global scale 0: the base model's K/V, none cached yet
    assert other.outputs[0].token_ids == runs["base"] and other.num_cached_tokens == 0
    again = llm.generate(PROMPT, greedy(lora={0: 1.0}))[0]
    assert again.outputs[0].token_ids == runs["merged"] and again.num_cached_tokens >= 16
    half = llm.generate(PROMPT, greedy(lora={0: 0.5}))[0]
    assert half.num_cached_tokens == 0


def test_bad_adapters_and_ids_are_one_line(files):
    with pytest.raises(HearthError, match="not a LoRA adapter"):
        make(files / "base.gguf", lora=[(str(files / "merged.gguf"), 1.0)])
    with pytest.raises(HearthError, match="FILE SCALE"):
        make(files / "base.gguf", lora=[(str(files / "adapter.gguf"), float("nan"))])
    llm = make(files / "base.gguf", lora=[(str(files / "adapter.gguf"), 1.0)])
    with pytest.raises(InvalidSamplingParams, match=r"lora names adapter id 1, but the server has ids 0..0"):
        llm.generate(PROMPT, greedy(lora={1: 0.5}))
    with pytest.raises(InvalidSamplingParams, match="no adapters"):
        make(files / "base.gguf").generate(PROMPT, greedy(lora={0: 0.5}))


def test_vllms_lora_request_runs_the_loaded_adapter_alone(files, runs):
    """vLLM's generate(..., lora_request=LoRARequest(name, id, path)) was a TypeError: it runs that adapter at
    scale 1 whatever the global scale, and a prompt without one runs the global scales."""
    from hearth.llm_lora import LoRARequest

    llm = make(files / "base.gguf", lora=[(str(files / "adapter.gguf"), 0.0)])
    asked = LoRARequest("adapter", 1, str(files / "adapter.gguf"))
    outs = llm.generate([PROMPT, PROMPT], greedy(), lora_request=[asked, None])
    assert [o.outputs[0].token_ids for o in outs] == [runs["merged"], runs["base"]]
    assert llm.generate(PROMPT, greedy(), lora_request=asked)[0].outputs[0].token_ids == runs["merged"]
