"""SamplingParams.prompt_logprobs: each prompt token's logprob (and the top k) from the engine, against
the model's own logits over the whole prompt in one prefill; a request asking for them takes no
prefix-cache hit (cached positions have no logits), as vLLM's rule."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from hearth import LLM, SamplingParams
from hearth.sampling_params import InvalidSamplingParams
from tests.gguf_factory import write_tiny_gguf
from tests.teacher_forced import logits_from

PROMPT = [(7 * i + 3) % 200 + 5 for i in range(40)]  # 40 tokens: 3 chunks of at most 16, 2.5 KV blocks
K = 3
ATOL = 1e-4
"""The engine's chunked prefill against one 40-row prefill of the same f32 model: the rows' sums
differ in their last bits across step sizes (measured max |diff| ~1e-6 here)."""


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "tiny-llama.gguf"
    write_tiny_gguf(path, "llama")
    # no max_logprobs cap: the vocabulary's own limit is tested here (the cap's: tests/test_llm.py)
    return LLM(str(path), max_model_len=256, max_num_seqs=4, max_num_batched_tokens=16, max_logprobs=-1,
               progress=False)


@pytest.fixture(scope="module")
def reference(llm) -> torch.Tensor:
    """[len(PROMPT) - 1, vocab]: log-softmax of the logits after each prefix, the last one aside
    (it predicts the first generated token). Computed first: it writes the cache's first blocks."""
    return torch.log_softmax(logits_from(llm, PROMPT, 0)[:-1], -1)


def _check(prompt_logprobs: list, reference: torch.Tensor, ranks: list | None = None) -> None:
    assert len(prompt_logprobs) == len(PROMPT) and prompt_logprobs[0] is None
    if ranks is not None:
        _check_ranks(ranks, reference)
    for i, entry in enumerate(prompt_logprobs[1:]):
        token, top = PROMPT[i + 1], reference[i].topk(K)
        assert next(iter(entry)) == token  # the prompt token first, then the top K
        assert entry[token] == pytest.approx(float(reference[i, token]), abs=ATOL)
        assert set(entry) == {token, *top.indices.tolist()}
        for t, v in zip(top.indices.tolist(), top.values.tolist()):
            assert entry[t] == pytest.approx(v, abs=ATOL)


def _check_ranks(ranks: list, reference: torch.Tensor) -> None:
    assert len(ranks) == len(PROMPT) and ranks[0] is None
    for i, rank in enumerate(ranks[1:]):
        low, high = rank_bounds(reference[i], PROMPT[i + 1])
        assert low <= rank <= high
    assert len(set(ranks[1:])) > 3  # a random model ranks the prompt's tokens all over its vocabulary


def rank_bounds(row: torch.Tensor, token: int) -> tuple[int, int]:
    """row: [vocab] reference logprobs -> the rank of `token` (1 + the tokens strictly more likely),
    lowest and highest, as the engine's sums may differ from the reference's by ATOL."""
    own = float(row[token])
    return 1 + int((row > own + ATOL).sum()), 1 + int((row > own - ATOL).sum())


def test_prompt_logprobs_match_the_models_logits(llm, reference):
    params = SamplingParams(max_tokens=2, temperature=0, prompt_logprobs=K)
    out = llm.generate({"prompt_token_ids": PROMPT}, params)[0]
    _check(out.prompt_logprobs, reference, out.prompt_ranks)
    assert llm.generate({"prompt_token_ids": PROMPT}, SamplingParams(max_tokens=2))[0].prompt_logprobs is None


def test_a_request_asking_for_them_skips_the_prefix_cache(llm, reference):
    plain = SamplingParams(max_tokens=1, temperature=0)
    llm.generate({"prompt_token_ids": PROMPT}, plain)  # the prompt's full blocks now cached
    assert llm.generate({"prompt_token_ids": PROMPT}, plain)[0].num_cached_tokens == 32
    out = llm.generate({"prompt_token_ids": PROMPT}, SamplingParams(max_tokens=1, temperature=0, prompt_logprobs=K))[0]
    assert out.num_cached_tokens == 0
    _check(out.prompt_logprobs, reference, out.prompt_ranks)


def test_batched_with_other_requests_and_zero_alternatives(llm, reference):
    """Beside other prompts in the same steps (rows of several sequences), and prompt_logprobs=0:
    the prompt token's own logprob only."""
    other = SamplingParams(max_tokens=3, temperature=0)
    outs = llm.generate([{"prompt_token_ids": PROMPT[5:]}, {"prompt_token_ids": PROMPT},
                         {"prompt_token_ids": PROMPT[:9]}],
                        [other, SamplingParams(max_tokens=3, temperature=0, prompt_logprobs=0), other])
    got = outs[1].prompt_logprobs
    assert [list(e) for e in got[1:]] == [[t] for t in PROMPT[1:]]
    _check_ranks(outs[1].prompt_ranks, reference)  # ranks over the whole vocabulary, with no top k asked
    assert [e[t] for e, t in zip(got[1:], PROMPT[1:])] == pytest.approx(
        reference[torch.arange(len(PROMPT) - 1), torch.tensor(PROMPT[1:])].tolist(), abs=ATOL)
    assert outs[0].prompt_logprobs is None and outs[2].prompt_logprobs is None and outs[0].prompt_ranks is None


def test_a_preempted_request_keeps_them_once(tmp_path, reference):
    """Preempted in the middle of its prompt and recomputed from the start, a request's prompt
    logprobs are neither lost nor doubled."""
    path = tmp_path / "tiny-llama.gguf"
    write_tiny_gguf(path, "llama")
    small = LLM(str(path), max_model_len=80, max_num_seqs=2, max_num_batched_tokens=16, num_kv_blocks=5,
                progress=False)
    params = SamplingParams(max_tokens=24, ignore_eos=True, temperature=0, prompt_logprobs=K)
    # the first decodes into a 4th block while the second is halfway through its prompt: 4 + 2 > 5
    outs = small.generate([{"prompt_token_ids": PROMPT}] * 2, params)
    assert small.engine.scheduler.num_preemptions > 0
    for out in outs:
        _check(out.prompt_logprobs, reference, out.prompt_ranks)


@pytest.mark.parametrize("field", ["prompt_logprobs", "logprobs"])
def test_more_alternatives_than_the_vocabulary_holds_is_an_error_naming_the_field(llm, field):
    """One request's too large k failed the runner's topk ("selected index k out of range"), and the
    whole step with it (the other request too): now a one-line error before anything is queued."""
    vocab = llm.model_config.vocab_size
    prompts = [{"prompt_token_ids": PROMPT[:3]}, {"prompt_token_ids": PROMPT[3:5]}]
    with pytest.raises(InvalidSamplingParams, match=f"^{field} must be at most the vocabulary's size \\({vocab}\\), got 100000$"):
        llm.generate(prompts, [SamplingParams(max_tokens=2, **{field: 100000}), SamplingParams(max_tokens=2)])
    assert not llm.engine.has_unfinished()
    outs = llm.generate(prompts, [SamplingParams(max_tokens=2, temperature=0, **{field: vocab}),
                                  SamplingParams(max_tokens=2)])  # the whole vocabulary: still fine
    entries = outs[0].prompt_logprobs[1:] if field == "prompt_logprobs" else outs[0].outputs[0].logprobs
    assert [len(e) for e in entries] == [vocab] * 2


def _computed(llm) -> list[int]:
    """Counts the rows each step computes, into the list returned (a spy on the runner)."""
    rows, real = [], llm.runner.execute

    def spy(so):
        rows.append(so.num_tokens)
        return real(so)

    llm.runner.execute = spy
    return rows


def test_n_children_compute_the_prompt_about_once(tmp_path, reference):
    """Asked of the first child only: the others hit its blocks in the prefix cache (a child asking
    for them takes no hit, so n computed the prompt n times: 4 x 40 rows). The result is n=1's."""
    path = tmp_path / "tiny-llama.gguf"
    write_tiny_gguf(path, "llama")
    llm = LLM(str(path), max_model_len=256, max_num_seqs=4, max_num_batched_tokens=16, progress=False)
    rows = _computed(llm)
    params = SamplingParams(max_tokens=1, temperature=0, prompt_logprobs=K, n=4)
    out = llm.generate({"prompt_token_ids": PROMPT}, params)[0]
    assert sum(rows) <= len(PROMPT) + 3 * (len(PROMPT) % 16)  # 40, then each sibling's last 8 past 2 blocks
    _check(out.prompt_logprobs, reference, out.prompt_ranks)
    one = llm.generate({"prompt_token_ids": PROMPT}, replace(params, n=1))[0]
    assert (out.prompt_logprobs, out.prompt_ranks) == (one.prompt_logprobs, one.prompt_ranks)


@pytest.mark.parametrize("stream", [False, True])
def test_completions_echo_with_n_computes_the_prompt_about_once(tmp_path, stream):
    """/v1/completions scoring with n=4 (echo, max_tokens 0, logprobs): every choice holds the prompt's
    logprobs, those of n=1, and the engine computes about one prompt's rows, not four."""
    import json

    from starlette.testclient import TestClient

    from hearth.api.app import create_app
    from hearth.api.served import ServedModel
    from hearth.engine.async_engine import AsyncEngine

    path = tmp_path / "tiny-llama.gguf"
    write_tiny_gguf(path, "llama")
    llm = LLM(str(path), max_model_len=256, max_num_seqs=4, max_num_batched_tokens=16, progress=False)
    rows = _computed(llm)
    body = {"model": "tiny", "prompt": PROMPT, "echo": True, "max_tokens": 0, "logprobs": K, "temperature": 0}

    def choices(r) -> list[dict]:
        assert r.status_code == 200, r.text
        if not stream:
            return r.json()["choices"]
        events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
        return [c for e in events for c in e["choices"] if c["logprobs"]]

    with TestClient(create_app(ServedModel.from_llm(llm, ["tiny"], AsyncEngine(llm.engine)))) as client:
        (one,) = choices(client.post("/v1/completions", json={**body, "stream": stream}))
        rows.clear()
        four = choices(client.post("/v1/completions", json={**body, "n": 4, "stream": stream}))
    assert sum(rows) <= len(PROMPT) + 3 * (len(PROMPT) % 16)  # was 4 x 40
    assert sorted(c["index"] for c in four) == [0, 1, 2, 3]
    assert all(c["logprobs"] == one["logprobs"] for c in four)
