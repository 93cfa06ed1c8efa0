"""Greedy generations of the real models equal llama.cpp's (goldens made by
benchmarks/make_goldens.py with llama-cpp-python, committed under tests/data/goldens)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hearth import LLM, SamplingParams

GOLDENS = Path(__file__).parent / "data" / "goldens"
NEW_TOKENS = 64


@pytest.fixture(scope="module", params=["smollm2-135m", "gemma3-270m"])
def golden_run(request, model_path):
    golden = json.loads((GOLDENS / f"greedy_{request.param}.json").read_text())
    cases = [c for c in golden["cases"] if len(c["new_token_ids"]) >= NEW_TOKENS]
    assert len(cases) >= 8, "goldens must hold at least 8 prompts with 64 new tokens"
    llm = LLM(str(model_path(request.param)), max_model_len=1024, progress=False)
    params = SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)
    outs = llm.generate([{"prompt_token_ids": c["prompt_token_ids"]} for c in cases], params)
    return cases, outs


def test_greedy_tokens_equal_llama_cpp(golden_run):
    cases, outs = golden_run
    mismatches = []
    for case, out in zip(cases, outs):
        got, want = out.outputs[0].token_ids, case["new_token_ids"][:NEW_TOKENS]
        if got != want:
            first = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
            mismatches.append(f"{case['prompt'][:30]!r}: first difference at token {first}")
    assert not mismatches, "\n".join(mismatches)
