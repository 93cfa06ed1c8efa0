"""A request that can never fit the KV cache: the context is clamped to what the cache holds for one
sequence, in one warning line, whether asked for or the model's own (never refused), a request past
it is a 400 naming both counts, and the engine loop sleeps, never spins, while only requests that
cannot be admitted wait (the trial's `--num-kv-blocks 8` server hung at 100% CPU)."""

from __future__ import annotations

import asyncio

import pytest
from starlette.testclient import TestClient

from hearth.api.app import create_app
from hearth.api.served import ServedModel
from hearth.engine.async_engine import AsyncEngine
from hearth.llm import LLM
from hearth.sampling_params import SamplingParams
from tests.engine.test_scheduler import make_engine
from tests.gguf_factory import write_tiny_gguf


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("tiny") / "tiny-llama.gguf"
    write_tiny_gguf(p, "llama", context=2048)
    return p


def test_the_context_is_what_the_cache_holds_for_one_sequence(model_file):
    llm = LLM(str(model_file), num_kv_blocks=2, block_size=16, progress=False)
    assert llm.max_model_len == 32
    out = llm.generate({"prompt_token_ids": [1, 2, 3, 4, 5]},
                       SamplingParams(max_tokens=100, ignore_eos=True, temperature=0))[0]
    assert len(out.outputs[0].token_ids) == 27 and out.outputs[0].finish_reason == "length"
    assert llm.engine.scheduler.kv.pool.num_free == 2


def test_a_context_asked_for_past_the_cache_is_lowered_in_one_warning_line(model_file, caplog):
    """`run --ctx 200000` on a model with large KV per token failed to start, naming flags `run` does
    not have, and a models-file context past the cache made every request a 503: now lowered."""
    with caplog.at_level("WARNING", logger="hearth"):
        llm = LLM(str(model_file), num_kv_blocks=2, block_size=16, max_model_len=256, progress=False)
    assert llm.max_model_len == 32
    lines = [r.getMessage() for r in caplog.records if "KV cache" in r.getMessage()]
    assert lines == ["context lowered to 32 tokens (from 256): the KV cache holds 32 tokens for one "
                     "sequence; a larger KV cache (kv_cache_memory_gb / num_kv_blocks) raises it, or, with a quantized "
                     "KV cache, fewer max_num_seqs (their staging shares the bound)"], lines
    assert LLM(str(model_file), num_kv_blocks=2, block_size=16, max_model_len=32, progress=False).max_model_len == 32


def test_a_request_past_the_cache_is_a_400_naming_both_counts(model_file):
    llm = LLM(str(model_file), num_kv_blocks=2, block_size=16, progress=False)
    with TestClient(create_app(ServedModel.from_llm(llm, ["tiny"], AsyncEngine(llm.engine)))) as c:
        r = c.post("/v1/completions", json={"model": "tiny", "prompt": [1, 2, 3, 4, 5], "max_tokens": 200})
        assert r.status_code == 400, r.text
        msg = r.json()["error"]["message"]
        assert "200" in msg and "32" in msg and "--max-model-len" not in msg, msg
        r = c.post("/v1/completions", json={"model": "tiny", "prompt": [1, 2, 3, 4, 5], "max_tokens": 30})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["message"] == (
            "max_tokens: this model's maximum context length is 32 tokens, but 35 were requested (5 in the prompt, "
            "30 in max_tokens); max_tokens can be at most 27 for this prompt")
        r = c.post("/v1/completions", json={"model": "tiny", "prompt": list(range(1, 41)), "max_tokens": 1})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["message"].startswith("prompt is 40 tokens but the context holds 32; shorten the prompt")
        r = c.post("/v1/completions", json={"model": "tiny", "prompt": [1, 2, 3], "max_tokens": 4})
        assert r.status_code == 200, r.text


def test_the_engine_loop_sleeps_while_only_unadmittable_requests_wait():
    """An EngineCore whose max_len the pool cannot hold (2 blocks of 4): the request preempts itself
    at 8 tokens and can never come back. The loop then waits for a command instead of stepping."""
    engine, sched, runner = make_engine(num_blocks=2, block_size=4, max_len=256)

    async def main(ae):
        stream = ae.add_request([1, 2, 3], SamplingParams(max_tokens=20, temperature=0))
        for _ in range(200):
            await asyncio.sleep(0.01)
            if sched.waiting and not sched.running:
                break
        steps = len(runner.steps)
        await asyncio.sleep(0.3)
        assert len(runner.steps) <= steps + 1, len(runner.steps) - steps  # the step in flight, then none
        stream.abort()
        for _ in range(100):
            if not engine.has_unfinished():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the abort never landed")

    ae = AsyncEngine(engine)
    ae.start()
    try:
        asyncio.run(main(ae))
    finally:
        ae.shutdown()
    assert sched.kv.pool.num_free == 2


def test_a_request_id_already_in_the_engine_is_refused():
    """A second request under a running one's id would take over its detokenizer: refused, the first
    left as it was."""
    engine, sched, _ = make_engine(num_blocks=8, block_size=4, max_len=64)
    engine.add_request([1, 2, 3], SamplingParams(max_tokens=2), request_id="x")
    with pytest.raises(ValueError, match="request id 'x' is already in the engine"):
        engine.add_request([4, 5], SamplingParams(max_tokens=2), request_id="x")
    assert [r.prompt_token_ids for r in sched.waiting] == [[1, 2, 3]]
