"""A seeded differential fuzz: batches of random greedy requests run through an engine with speculation and
one without, and everything a client sees must be the same (docs/speculative.md: greedy output with
speculation is token for token the output without it, and every stop, limit, grammar and abort acts on each
accepted token as on a decoded one).

Each case draws, from SEED, 1 to 4 requests batched in one engine: prompts of repeated fragments (so the
n-gram and suffix proposers draft), some repeating an earlier case's prompt (prefix-cache hits), with
max_tokens, min_tokens, ignore_eos, a logit bias on EOS (so answers end by it), stop token ids and stop strings
taken from what a probe run without them produced, logprobs with top_logprobs, a json-schema, regex, choice or
forced-tool-call grammar on some, penalties on a few, and on some an abort once the answer holds k tokens; a
few cases run over a q8_0 KV cache (where the tier speculates over one). The same cases run with ngram, ngram
trees, suffix, a draft model (the target's weights plus noise: accepted often, rejected often enough) and draft
trees, each against a plain engine that drafts nothing (not even grammar-forced tokens).

What must be equal: token ids, text, finish and stop reasons, cached prompt tokens, and logprobs exactly (a
tolerance of 0: a verify row is summed as a decode row, bit for bit, so its log-softmax is the same float; any
difference is a row computed in another kernel regime, which a near-tie turns into another token). An aborted
request is held to the plain run's prefix (speculation reaches the abort's k tokens in fewer steps, possibly
past k), the others of its batch to equality. Each method must have drafted and accepted tokens (its spec
counters), so a run where speculation silently stays off fails."""

from __future__ import annotations

import itertools
import os
import random
from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np
import pytest

from hearth import LLM, SamplingParams
from hearth.sampling_params import StructuredOutput
from hearth.tool_parsers import call_constraint
from tests.gguf_factory import SPECULATES, write_tiny_gguf

SEED = int(os.environ.get("HEARTH_SPEC_FUZZ_SEED", "20261207"))
CASES_PER_METHOD = int(os.environ.get("HEARTH_SPEC_FUZZ_CASES", "8"))
"""make test's; a longer hunt: HEARTH_SPEC_FUZZ_CASES=200 HEARTH_SPEC_FUZZ_SEED=n (a failure names its case)."""
CONTEXT = 128
REQUEST_IDS = itertools.count()
EOS, BOS = 319, 318  # the tiny gpt2 vocabulary's (tests/gguf_factory.py)
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}]
GRAMMARS = {
    "json": lambda: StructuredOutput(json_schema={"type": "object", "properties": {
        "n": {"type": "integer"}, "tag": {"type": "string", "maxLength": 6}}, "required": ["n", "tag"]}),
    "regex": lambda: StructuredOutput(regex=r"(ab|cd)+[0-9]{2,5}( the)*"),
    "choice": lambda: StructuredOutput(regex="(alpha beta)|(alpha gamma)|(delta)"),  # the API's choice, as a regex
    "required": lambda: StructuredOutput(grammar=call_constraint("hermes", TOOLS, "required").lark()),
    "named": lambda: StructuredOutput(grammar=call_constraint(
        "hermes", TOOLS, {"type": "function", "function": {"name": "add"}}).lark()),
}
METHODS = {
    "ngram": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1},
    "ngram-tree": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "tree_budget": 8},
    "suffix": {"method": "suffix", "num_speculative_tokens": 6},
    "draft": {"method": "draft", "num_speculative_tokens": 3},
    "draft-tree": {"method": "draft", "num_speculative_tokens": 3, "tree_budget": 8},
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """(target, draft): a tiny Q8_0 llama (the native kernels verify rows bit for bit, so speculation runs) and
    the same weights plus noise (its drafts are the target's tokens often, not always)."""
    d = tmp_path_factory.mktemp("fuzz")
    target, draft = d / "t.gguf", d / "d.gguf"
    dims = {"qtype": "Q8_0", **SPECULATES}  # head_dim 32: the native attention, and q8_0 KV blocks fit a head
    write_tiny_gguf(target, "llama", **dims)
    rng = np.random.default_rng(1)
    write_tiny_gguf(draft, "llama", **dims,
                    adjust=lambda name, a: a + 0.15 * a.std() * rng.standard_normal(a.shape).astype(a.dtype))
    return str(target), str(draft)


@dataclass
class Got:
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    logprobs: list[dict[int, float]] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    cached: int = 0
    aborted: bool = False
    last_delta: int = 0
    """Tokens in the output that finished it: > 1 where a stop ended an accepted run."""


def run(llm: LLM, prompts: list[list[int]], params: list[SamplingParams], aborts: dict[int, int]) -> list[Got]:
    """The requests batched in llm's engine, stepped as LLM.generate steps it; request i aborted once its
    answer holds aborts[i] tokens (as a client that hangs up)."""
    eng = llm.engine
    rids = [eng.add_request(p, sp, request_id=str(next(REQUEST_IDS))) for p, sp in zip(prompts, params)]
    got = {rid: Got() for rid in rids}
    while eng.has_unfinished():
        for o in eng.step():
            assert o.error is None, o.error
            g = got[o.request_id]
            g.token_ids += o.new_token_ids
            g.text += o.new_text
            g.logprobs += o.new_logprobs or []
            g.cached = o.num_cached_tokens
            if o.finished:
                g.finish_reason, g.stop_reason, g.last_delta = o.finish_reason, o.stop_reason, len(o.new_token_ids)
        for i, k in aborts.items():
            g = got[rids[i]]
            if g.finish_reason is None and len(g.token_ids) >= k:
                eng.abort(rids[i])
                g.finish_reason, g.aborted = "abort", True
    return [got[r] for r in rids]


def fragments_prompt(rng: random.Random) -> list[int]:
    """Repeated fragments of random ids: the proposers find n-grams to draft from in the prompt."""
    frags = [[rng.randrange(BOS) for _ in range(rng.randint(2, 5))] for _ in range(rng.randint(1, 3))]
    out: list[int] = []
    while len(out) < rng.randint(12, 40):
        out += rng.choice(frags)
    return out


def draw_params(rng: random.Random) -> SamplingParams:
    """A greedy request's params without stops (those come from its probe)."""
    max_tokens = rng.choice([rng.randint(1, 40), rng.randint(1, 40), None])  # None: to the context's end
    p = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=rng.random() < 0.3,
                       min_tokens=min(max_tokens or CONTEXT, rng.choice([0, 0, 0, 2, 7])),
                       skip_special_tokens=rng.random() < 0.8)
    if rng.random() < 0.4:
        p.logit_bias = {EOS: rng.uniform(2.0, 6.0)}  # EOS wins a row now and then: answers end by it
    if rng.random() < 0.5:
        p.logprobs = rng.choice([0, 1, 3])
    if rng.random() < 0.3:
        p.structured_output = GRAMMARS[rng.choice(sorted(GRAMMARS))]()
        p.max_tokens = max(p.max_tokens or CONTEXT, 24)
    elif rng.random() < 0.2:  # samplers that read the history, the drafts before a verify row included
        p.repetition_penalty, p.presence_penalty, p.dry_multiplier = rng.choice(
            [(1.3, 0.0, 0.0), (1.0, 0.8, 0.0), (1.0, 0.0, 0.8)])
    return p


def add_stops(rng: random.Random, p: SamplingParams, probe: Got) -> SamplingParams:
    """Stop token ids and stop strings from what the probe produced, so they fire inside an answer
    (inside an accepted run, where speculation ran)."""
    p = replace(p)
    if probe.token_ids and rng.random() < 0.3:
        p.stop_token_ids = [rng.choice(probe.token_ids[rng.randrange(len(probe.token_ids)):])]
    text = probe.text
    if len(text) > 2 and rng.random() < 0.5:
        at = rng.randrange(len(text) - 1)
        p.stop = [text[at:at + rng.randint(1, 4)]]
        if rng.random() < 0.3:
            p.stop.append(text[rng.randrange(len(text)):][:3] or "zz")
        p.include_stop_str_in_output = rng.random() < 0.3
    if len(probe.token_ids) > 3 and p.structured_output is None and rng.random() < 0.1:
        at = rng.randrange(len(probe.token_ids) - 1)
        p.bad_words_token_ids = [probe.token_ids[at:at + 2]]  # a word the probe said: banned where it would end
    return p


def draw_case(rng: random.Random, earlier: list[list[int]]) -> tuple[list[list[int]], list[SamplingParams], dict]:
    prompts = []
    for _ in range(rng.choice([1, 1, 2, 3, 4])):
        if earlier and rng.random() < 0.3:  # a prefix-cache hit: an earlier prompt, whole or extended
            p = list(rng.choice(earlier)) + fragments_prompt(rng)[: rng.choice([0, 5])]
        else:
            p = fragments_prompt(rng)
        prompts.append(p)
    earlier += prompts
    params = [draw_params(rng) for _ in prompts]
    aborts = {i: rng.randint(1, 10) for i in range(len(prompts)) if rng.random() < 0.15}
    return prompts, params, aborts


def assert_same(want: Got, got: Got, where: str) -> None:
    if want.aborted or got.aborted:  # both stop at or past k tokens: the shorter is the longer's start
        n = min(len(want.token_ids), len(got.token_ids))
        assert got.token_ids[:n] == want.token_ids[:n], where
        assert got.logprobs[:n] == want.logprobs[:n], where
        assert got.text.startswith(want.text) or want.text.startswith(got.text), where
        return
    assert got.token_ids == want.token_ids, where
    assert got.text == want.text, where
    assert (got.finish_reason, got.stop_reason) == (want.finish_reason, want.stop_reason), where
    assert got.logprobs == want.logprobs, where  # exactly: see the module's docstring
    assert got.cached == want.cached, where


@pytest.mark.usefixtures("native_speculation")
def test_speculation_equals_plain_decoding_on_random_requests(models):
    seen: Counter[str] = Counter()
    for method in METHODS:
        accepted = fuzz_method(*models, method, seen)
        assert accepted > 0, f"{method}: nothing drafted and accepted, so nothing was compared"
        seen[f"{method} accepted"] = accepted
    # each way to end an answer, and a stop inside an accepted run, came up
    want = {"stop string in a run", "stop token in a run", "max_tokens in a run", "EOS", "context", "abort",
            "grammar", "logprobs", "min_tokens", "prefix hit", "penalties", "bad words"}
    if LLM(models[0], progress=False, kv_cache_dtype="q8_0", speculative_config=METHODS["ngram"]).speculation_off == "":
        want.add("q8_0 KV")
    assert want <= set(seen), (want - set(seen), seen)
    print(dict(seen))


def fuzz_method(target: str, draft: str, method: str, seen: Counter[str]) -> int:
    """CASES_PER_METHOD cases through a plain and a speculating engine with `method`; -> accepted drafts."""
    spec_config = {**METHODS[method], "cost_aware": False, "disable_by_batch_size": 0}
    if spec_config["method"] == "draft":
        spec_config["model"] = draft
    rng = random.Random(f"{SEED}-{method}")
    # blocks for every case: no eviction, whose order differs (a rejected draft's block was taken from the free list)
    common = {"progress": False, "max_logprobs": -1, "max_model_len": CONTEXT, "num_kv_blocks": 4096}
    engines = {}
    for kv in ("auto", "q8_0"):
        spec = LLM(target, kv_cache_dtype=kv, speculative_config=spec_config, **common)
        if kv != "auto" and spec.speculation_off:  # the avx2 tier attends over f16 caches only
            continue
        assert spec.speculation_off == "", spec.speculation_off
        plain = LLM(target, kv_cache_dtype=kv, grammar_drafts=False, **common)  # one token a step, always
        engines[kv] = (LLM(target, kv_cache_dtype=kv, **common), plain, spec)  # the probe's own: caches stay alike
    earlier: list[list[int]] = []
    for case in range(CASES_PER_METHOD):
        kv = "q8_0" if case % 4 == 3 and "q8_0" in engines else "auto"
        probe_llm, plain, spec = engines[kv]
        prompts, params, aborts = draw_case(rng, earlier)
        probes = run(probe_llm, prompts, params, {})
        params = [add_stops(rng, p, g) for p, g in zip(params, probes)]
        want = run(plain, prompts, params, aborts)
        got = run(spec, prompts, params, aborts)
        for i, (w, g) in enumerate(zip(want, got)):
            where = f"seed {SEED}, {method} case {case} request {i} ({kv} KV): {prompts[i]} {params[i]}"
            assert_same(w, g, where)
            seen.update(covered(params[i], g, kv))
    return sum(e[2].engine.spec.stats.num_accepted_tokens for e in engines.values())


def covered(p: SamplingParams, g: Got, kv: str) -> list[str]:
    """What a request exercised (the fuzz's coverage, asserted and printed)."""
    end = ("abort" if g.aborted else "stop token" if isinstance(g.stop_reason, int) else "stop string" if g.stop_reason
           else "EOS" if g.finish_reason == "stop" else "max_tokens" if p.max_tokens else "context")
    out = [end, *([f"{end} in a run"] if g.last_delta > 1 else [])]
    out += [name for name, on in [("grammar", p.structured_output), ("logprobs", p.logprobs is not None),
                                  ("min_tokens", p.min_tokens), ("prefix hit", g.cached), ("q8_0 KV", kv == "q8_0"),
                                  ("penalties", p.repetition_penalty != 1 or p.presence_penalty or p.dry_multiplier),
                                  ("bad words", p.bad_words_token_ids)] if on]
    return out
