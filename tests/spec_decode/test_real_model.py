"""Speculative decoding on the real SmolLM2: greedy with n-gram drafts is token for token greedy
without them (the verify rows are computed bit for bit as decode rows: see ModelRunner.row_regimes),
and so are logprobs, stop handling, structured output, a quantized KV cache and prefix-cache hits.
Every equality test also asserts that drafts were proposed and accepted, so none passes vacuously."""

from __future__ import annotations

import json

import pytest

from hearth import LLM, SamplingParams
from hearth.sampling_params import StructuredOutput

CODE = '''def add(a, b):
    """Return a plus b."""
    return a + b


def sub(a, b):
    """Return a minus b."""
    return a - b


def mul(a, b):
'''
LIST = ("Repeat this list exactly, one item per line: apple, banana, cherry, date, elderberry, fig, grape, "
        "honeydew, kiwi, lemon, mango, nectarine, orange, papaya.")
SPEC = {"method": "ngram", "num_speculative_tokens": 5, "cost_aware": False}  # the machinery, drafting all it can


def load(model_path, **kw) -> LLM:
    return LLM(str(model_path("smollm2-135m")), progress=False, max_model_len=2048, **kw)


@pytest.fixture(scope="module")
def spec_llm(model_path):
    return load(model_path, speculative_config=SPEC)


def generate(llm, prompt, params, fresh=True):
    """One request alone (batch composition changes a row's kernels); fresh: no prefix-cache hit.
    -> (completion, drafts verified, drafts accepted) during it."""
    if fresh:
        llm.engine.scheduler.kv.pool.reset_prefix_cache()
    s = llm.engine.spec.stats if llm.engine.spec is not None else None
    before = (s.num_draft_tokens, s.num_accepted_tokens) if s else (0, 0)
    out = llm.generate(prompt, params)[0].outputs[0]
    after = (s.num_draft_tokens, s.num_accepted_tokens) if s else (0, 0)
    return out, after[0] - before[0], after[1] - before[1]


_PLAIN: dict[tuple[str, str], tuple[LLM, object]] = {}


def plain_greedy(llm, prompt, params):
    """generate(llm, prompt, params)[0] for the session's plain SmolLM2 (conftest's smol_llm), run once
    per (prompt, params) and kept: a dozen tests here and beside compare their drafts against the same
    few greedy runs, which a fresh, lone request repeats token for token."""
    assert params.temperature == 0 and llm.engine.spec is None
    key = (repr(prompt), repr(params))
    if key not in _PLAIN or _PLAIN[key][0] is not llm:
        _PLAIN[key] = (llm, generate(llm, prompt, params)[0])
    return _PLAIN[key][1]


def chat(llm, text):
    return {"prompt_token_ids": llm.encode_chat([{"role": "user", "content": text}])}


GREEDY = SamplingParams(temperature=0, max_tokens=96, ignore_eos=True)
STORY = "Write a short story about a cat."


def assert_greedy_equals_plain(plain, spec, which: str, min_drafted: int, min_rate: float) -> None:
    """Greedy with speculation (`spec`) on the `which` prompt ("code" or "story") is `plain` greedy
    token for token, with at least min_drafted drafts verified and min_rate of them accepted: a run
    that drafted or accepted nothing fails."""
    prompt = CODE if which == "code" else chat(plain, STORY)
    want = plain_greedy(plain, prompt, GREEDY)
    got, drafted, accepted = generate(spec, prompt, GREEDY)
    assert got.token_ids == want.token_ids and got.text == want.text
    assert drafted >= min_drafted and accepted >= min_rate * drafted and accepted > 0, (drafted, accepted)


@pytest.mark.parametrize("which", ["code", "list"])
def test_greedy_with_ngram_drafts_equals_plain_greedy(smol_llm, spec_llm, which):
    prompt = CODE if which == "code" else chat(smol_llm, LIST)
    want = plain_greedy(smol_llm, prompt, GREEDY)
    got, drafted, accepted = generate(spec_llm, prompt, GREEDY)
    assert got.token_ids == want.token_ids and got.text == want.text
    assert drafted > 0 and accepted >= 10, (drafted, accepted)


@pytest.fixture(scope="module")
def long_spec_llm(model_path):
    """Chains of 24 drafts: 25-row verify steps, past the first row regime (native.batch_min_rows())
    where the runner keeps the step on the GEMV (ModelRunner.verify_rows)."""
    return load(model_path, speculative_config=dict(SPEC, num_speculative_tokens=24))


@pytest.mark.parametrize("k", [5, 20, 24])
def test_drafts_equal_to_the_targets_greedy_continuation_are_accepted(smol_llm, spec_llm, long_spec_llm, k,
                                                                      monkeypatch):
    """An oracle proposer drafting plain greedy's own next tokens: the target accepts them all
    (>= 98%), which it can only do when a verify row is a decode row, in 6-row steps, 21-row ones
    (with AMX: a tile pass and 5 rows on the GEMV) and 25-row ones (two passes)."""
    spec_llm = spec_llm if k == 5 else long_spec_llm
    prompt = chat(smol_llm, STORY)
    want = plain_greedy(smol_llm, prompt, GREEDY)
    ids = want.token_ids
    rows, execute = [], spec_llm.runner.execute
    monkeypatch.setattr(spec_llm.runner, "execute", lambda so: rows.append(so.num_tokens) or execute(so))

    class Oracle:
        def propose(self, requests, num_tokens):
            return {r.request_id: ids[len(r.output_token_ids):len(r.output_token_ids) + min(n, k)]
                    for r, n in zip(requests, num_tokens)}

        def forget(self, request_id):
            pass

    monkeypatch.setattr(spec_llm.engine.spec, "proposer", Oracle())
    got, drafted, accepted = generate(spec_llm, prompt, GREEDY)
    assert got.token_ids == ids
    assert drafted >= 60 and accepted >= 0.98 * drafted, (drafted, accepted)
    assert max(rows[1:]) == k + 1  # the steps after the prompt's: every draft verified


def test_logprobs_with_drafts_are_the_targets(smol_llm, spec_llm):
    p = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True, logprobs=5)
    want, _, _ = generate(smol_llm, CODE, p)
    got, _, accepted = generate(spec_llm, CODE, p)
    assert accepted > 0 and got.token_ids == want.token_ids
    assert got.logprobs == want.logprobs  # bit-identical rows: the same numbers, not close ones


def test_stop_string_max_tokens_and_stop_token_inside_accepted_runs(smol_llm, spec_llm):
    full = plain_greedy(smol_llm, CODE, GREEDY)
    text, ids = full.text, full.token_ids
    # as late as the output has one (drafts are accepted by then: asserted below), and nowhere earlier
    stop = [text[i:i + 5] for i in range(len(text) - 4) if text.find(text[i:i + 5]) == i][-1]
    stop_id = [t for i, t in enumerate(ids) if ids.index(t) == i][-1]
    for p in (SamplingParams(temperature=0, max_tokens=96, stop=[stop]),
              SamplingParams(temperature=0, max_tokens=71, ignore_eos=True),
              SamplingParams(temperature=0, max_tokens=96, stop_token_ids=[stop_id])):
        want, _, _ = generate(smol_llm, CODE, p)
        got, _, accepted = generate(spec_llm, CODE, p)
        assert accepted > 0
        assert (got.token_ids, got.text, got.finish_reason, got.stop_reason) == (
            want.token_ids, want.text, want.finish_reason, want.stop_reason)


def test_structured_output_with_drafts_equals_without(smol_llm, spec_llm):
    # the list copied into one string: drafts from the prompt are accepted on every tier (a list of items
    # cut to 12 characters was SmolLM2's own text, 0 of 6 drafts accepted at avx2)
    schema = {"type": "object", "properties": {"list": {"type": "string", "maxLength": 160}}, "required": ["list"]}
    p = SamplingParams(temperature=0, max_tokens=200, structured_output=StructuredOutput(json_schema=schema))
    prompt = chat(smol_llm, LIST + " Answer in JSON as {\"list\": \"...\"}.")
    want, _, _ = generate(smol_llm, prompt, p)
    got, drafted, accepted = generate(spec_llm, prompt, p)
    assert drafted > 0 and accepted > 0
    assert got.token_ids == want.token_ids
    assert json.loads(got.text)["list"].startswith("apple, banana")


def test_seeded_sampling_with_drafts_is_reproducible(spec_llm):
    # a low temperature keeps the draws near the code's repeats, so drafts are accepted whatever
    # the kernels' last bits (at 0.7, seed 5's 64 tokens accepted none of their drafts)
    p = SamplingParams(temperature=0.3, seed=5, max_tokens=64, ignore_eos=True)
    a, _, acc = generate(spec_llm, CODE, p)
    b, _, _ = generate(spec_llm, CODE, p)
    assert acc > 0 and a.token_ids == b.token_ids


def test_quantized_kv_and_prefix_cache_hits_with_drafts_equal_plain(model_path):
    """q8_0 seals a block when it fills: drafts stop before a last slot, so every block is sealed
    from committed tokens. The second run of each prompt starts from cached blocks that the
    speculative run registered."""
    plain, spec = load(model_path, kv_cache_dtype="q8_0"), load(model_path, kv_cache_dtype="q8_0", speculative_config=SPEC)
    if spec.speculation_off:  # the avx2 tier attends over bf16/f16 caches only
        pytest.skip(spec.speculation_off)
    prompts = [CODE, CODE + "    return a * b\n\n\ndef div(a, b):\n"]
    want = [generate(plain, x, GREEDY, fresh=i == 0)[0] for i, x in enumerate(prompts)]
    got = [generate(spec, x, GREEDY, fresh=i == 0) for i, x in enumerate(prompts)]
    assert [g[0].token_ids for g in got] == [w.token_ids for w in want]
    assert all(g[2] > 0 for g in got)
    assert spec.engine.scheduler.kv.stats.hits > 0
