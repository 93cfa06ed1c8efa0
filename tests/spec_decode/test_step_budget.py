"""A chain's K past the step budget (K + 1 > max_num_batched_tokens) is not an error: the scheduler's
second pass gives drafts only the tokens a step has left, as vLLM's scheduler trims spec_token_ids to
the scheduled tokens, so every step stays within max_num_batched_tokens, every request is scheduled
and greedy output equals plain greedy. (A tree_budget at or past the step budget stays an error: a
tree's node count is its own knob, tests/spec_decode/test_tree_real_model.py.)"""

from __future__ import annotations

import pytest

from hearth import LLM, SamplingParams
from tests.gguf_factory import SPECULATES, write_tiny_gguf

BUDGET = 4
PROMPTS = ["one two three one two three one two three one two", "a b a b a b a b a"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("budget") / "q8.gguf"  # Q8_0: the native kernels verify rows bit for bit
    write_tiny_gguf(path, "llama", qtype="Q8_0", **SPECULATES)
    return str(path)


def _steps(llm: LLM) -> list[tuple[int, int]]:
    """Each step's (tokens, drafts), recorded at the runner."""
    steps = []
    run = llm.runner._run
    llm.runner._run = lambda so: steps.append((so.num_tokens, sum(s.num_drafts for s in so.seqs))) or run(so)
    return steps


@pytest.mark.parametrize("method", ["ngram", "draft"])
@pytest.mark.usefixtures("native_speculation")
def test_k_past_the_step_budget_trims_drafts_within_it(tiny, method):
    spec = {"method": method, "num_speculative_tokens": 8, "cost_aware": False}
    if method == "draft":
        spec["model"] = tiny  # the target drafting for itself: its drafts are its greedy tokens
    p = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    plain = LLM(tiny, progress=False, max_num_batched_tokens=BUDGET)
    want = [plain.generate([q], p)[0].outputs[0].token_ids for q in PROMPTS]
    llm = LLM(tiny, progress=False, max_num_batched_tokens=BUDGET, speculative_config=spec)
    assert llm.speculation_off == ""
    steps = _steps(llm)
    got = [llm.generate([q], p)[0].outputs[0].token_ids for q in PROMPTS]
    got.append([o.outputs[0].token_ids for o in llm.generate(PROMPTS, p)])  # two decodes share a step's room
    want.append(want[:])
    assert got == want and all(len(t) == 24 for t in got[:2])
    assert max(n for n, _ in steps) <= BUDGET  # never past the budget
    # K = 8 trimmed to the 3 a lone decode leaves (the n-gram proposer drafts where the random model's text repeats)
    assert max(k for _, k in steps) == BUDGET - 1 if method == "draft" else 0 < max(k for _, k in steps) < BUDGET
    assert llm.engine.spec.stats.num_accepted_tokens > 0 or method == "ngram"  # the random model's text rarely repeats
