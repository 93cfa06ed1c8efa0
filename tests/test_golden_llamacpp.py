"""The real models against llama.cpp (goldens made by benchmarks/make_goldens.py with
llama-cpp-python, committed under tests/data/goldens).

hearth and llama.cpp do the same math in different arithmetic: llama.cpp quantizes activations to
8 bits for its integer dot products, hearth's CPU path rounds them to bf16. On tiny F32 models the two
agree to ~1e-4; on the quantized real models logits differ by up to ~0.6, so wherever llama.cpp's own
top-1 margin is smaller than that, either token is a faithful greedy choice. Hence two tests:
- teacher-forced: fed llama.cpp's tokens, hearth's argmax equals llama.cpp's at every one of the 64
  steps of every case, except where llama.cpp's margin is below TIE (then llama.cpp's token must be
  within TIE of hearth's best), or where the f32 reference (tests/data/reference, for the models that
  have one) ranks the two tokens within TIE of each other: there llama.cpp's margin is its own error
  (SmolLM2, 'In 1969', step 17: llama.cpp 0.79 for a token the reference puts 0.19 ahead; hearth's
  avx2 tier on a Zen 4 ranked the other one 0.29 ahead, and bf16 or f32 attention moved that by 0.26);
- free-running: greedy generation equals llama.cpp's token for token over 64 tokens on the cases
  where llama.cpp's margin never drops below ROBUST = TIE (at least 8 per model; mostly prompts that
  ask the model to continue a passage it has seen three times). A smaller margin is within the two
  engines' arithmetic difference: at 0.51 ('Der Zug nach Hamburg', step 13) hearth's own margin was
  0.03, and a change of summation order in a batched matmul flipped it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hearth import LLM, SamplingParams
from tests.teacher_forced import LOWER_TIER_CASES, STEPS, at_lower_tier, prefetch, teacher_forced

GOLDENS = Path(__file__).parent / "data" / "goldens"
REFERENCE = Path(__file__).parent / "data" / "reference"
NEW_TOKENS = STEPS
TIE = 0.75
"""Logit margin below which llama.cpp and hearth may rank two tokens differently (see above)."""
ROBUST = TIE
"""Smallest llama.cpp margin over 64 steps for a case to be compared free-running."""
MODELS = ["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]
LIMIT = {"qwen2.5-coder-0.5b": 12, "qwen2.5-coder-1.5b": 8}
"""The Qwen pair: teacher-forced on this many first cases (on 2 cores all 34 took 4-7 min a model)."""
FREE = {"gemma3-270m": 8, "qwen2.5-coder-0.5b": 8, "qwen2.5-coder-1.5b": 4}
"""Free-running on this many first robust cases (default: all, SmolLM2's 8 at every tier). gemma3's 21 took 46 s
of 2 busy cores until 2026-12-07, 8 took 11; the 1.5B's 4 take 2/3 of 8's CPU time (the 0.5B, same architecture,
quant types and vocabulary, runs 8 at the best tier). With gemma3's sliding window shrunk to 64 (a bug its 512 never
shows on these prompts) two cases part from llama.cpp teacher-forced, robust case 12 among them: its first 8 robust
ones still fail. Teacher-forced, gemma3 keeps all 34 (its first 12 missed both)."""
LOWER_TIER_FREE = {"qwen2.5-coder-0.5b": 4}
"""Free-running at a lower tier (tests/teacher_forced.py LOWER_TIER_CASES): the 0.5B's 8 took ~25 CPU-s there."""


@pytest.fixture(scope="module", params=MODELS)
def golden(request, model_path):
    doc = json.loads((GOLDENS / f"greedy_{request.param}.json").read_text())
    llm = LLM(str(model_path(request.param)), max_model_len=1024, progress=False)
    limit = LIMIT.get(request.param)
    if at_lower_tier():  # gemma3's and the 1.5B's run only at the best tier in make test (ONCE): all of theirs
        limit = LOWER_TIER_CASES.get(request.param, limit)
    return request.param, doc["cases"], llm, limit


def robust(case) -> bool:
    return min(case["top1_margins"][:NEW_TOKENS]) >= ROBUST


def reference_tie(ref, i: int, step: int, a: int, b: int) -> bool:
    """The f32 reference holds tokens a and b at case i's step within TIE of each other (False where there
    is no reference or either token is outside its top K)."""
    if ref is None:
        return False
    ids, logprobs = ref["ids"][i, step].tolist(), ref["logprobs"][i, step]
    return a in ids and b in ids and abs(logprobs[ids.index(a)] - logprobs[ids.index(b)]) < TIE


def test_teacher_forced_argmax_agrees_with_llama_cpp(golden):
    name, cases, llm, limit = golden
    problems = []
    prefetch(llm, name, cases[:limit])
    path = REFERENCE / f"{name}.npz"
    ref = np.load(path) if path.exists() else None
    for i, case in enumerate(cases[:limit]):
        forced = teacher_forced(llm, name, case, i)  # one prefill, shared with models/test_fidelity.py
        for step, (best, gap, want, margin) in enumerate(zip(forced.best, forced.gap, case["new_token_ids"],
                                                              case["top1_margins"])):
            if best == want or reference_tie(ref, i, step, best, want):
                continue
            if margin >= TIE or gap >= TIE:
                problems.append(f"{case['prompt'][:30]!r} step {step}: hearth {best}, llama.cpp {want} "
                                f"(llama.cpp margin {margin:.3f}, hearth gap {gap:.3f})")
    assert not problems, "\n".join(problems)


def test_free_running_greedy_equals_llama_cpp(golden):
    name, cases, llm, _ = golden
    limit = LOWER_TIER_FREE.get(name) if at_lower_tier() else FREE.get(name)
    chosen, want = [c for c in cases if robust(c)][:limit], limit or 8
    assert len(chosen) >= want, f"only {len(chosen)} golden cases keep llama.cpp's margin >= {ROBUST} for 64 tokens"
    params = SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)
    outs = llm.generate([{"prompt_token_ids": c["prompt_token_ids"]} for c in chosen], params)
    for case, out in zip(chosen, outs):
        assert out.outputs[0].token_ids == case["new_token_ids"][:NEW_TOKENS], case["prompt"][:40]
