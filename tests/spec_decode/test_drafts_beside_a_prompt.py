"""Drafts in a step that computes another request's prompt chunk (found by
tests/spec_decode/test_fuzz_equivalence.py). Two requests with one prompt: the second waits a step for the
first's block, then prefills its last 14 tokens beside the two decodes, a 16-row step in the batch GEMMs'
regime. Drafts verified there were summed by those GEMMs, where without speculation the same positions are
decoded a step later in a 3-row step by the GEMV: other bits (logprobs differed in their last places, and a
near-tie would give another token). Such a step now drafts nothing (Scheduler._add_drafts)."""

from __future__ import annotations

import pytest

from hearth import LLM, SamplingParams
from tests.gguf_factory import SPECULATES, write_tiny_gguf


@pytest.mark.usefixtures("native_speculation")
def test_drafts_beside_a_prompt_chunk_are_summed_as_the_next_steps_decodes(tmp_path):
    path = tmp_path / "q8.gguf"
    write_tiny_gguf(path, "llama", qtype="Q8_0", **SPECULATES)  # the native kernels: speculation runs
    shared = [219, 261, 36, 57, 252, 56, 151, 213] * 3 + [5, 6, 7, 8, 9, 10]  # 30: a full block and 14 more
    prompts = [{"prompt_token_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]}, {"prompt_token_ids": shared},
               {"prompt_token_ids": shared}]
    p = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, logprobs=2)
    want = LLM(str(path), progress=False).generate(prompts, p)
    # the target drafting for itself: its drafts are its greedy tokens, accepted wherever their rows match
    llm = LLM(str(path), progress=False, speculative_config={"method": "draft", "model": str(path),
                                                             "num_speculative_tokens": 3, "cost_aware": False})
    steps = []
    run = llm.runner._run
    llm.runner._run = lambda so: steps.append((so.num_tokens, sum(s.num_drafts for s in so.seqs))) or run(so)
    got = llm.generate(prompts, p)
    assert steps[1][0] - steps[1][1] == 16  # the step with the third prompt's chunk beside two decodes
    for g, w in zip(got, want):
        assert g.outputs[0].token_ids == w.outputs[0].token_ids
        assert g.outputs[0].logprobs == w.outputs[0].logprobs  # bit for bit
    assert llm.engine.spec.stats.num_accepted_tokens >= 6
