"""qwen35 and qwen35moe against llama.cpp itself: its greedy continuations of the tiny files (tests/qwen35_factory.py,
written as llama.cpp's converter writes them), made by benchmarks/make_qwen35_golden.py with llama.cpp 0.3.36's
own qwen35 / qwen35moe graphs and recurrent memory, committed under tests/data/goldens. The two engines' arithmetic
differs (llama.cpp's logits measured ~4e-4 (qwen35) and ~1e-3 (qwen35moe) of the largest off transformers' and
hearth's, which agree to ~1e-5), so where llama.cpp's top-1 margin is below TIE either token is faithful:
- free-running, the three prompts batched and cut into chunks: hearth's tokens equal llama.cpp's up to the first
  such step (measured: all 16 of every case equal);
- teacher-forced, each prompt followed by llama.cpp's tokens as one prompt (chunked prefill of the recurrent
  state): hearth's top-1 is llama.cpp's token at every step whose margin is TIE or more."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from hearth import LLM, SamplingParams
from tests.qwen35_factory import FILES, NEW, PROMPTS, write_files

GOLDEN = Path(__file__).parent.parent / "data" / "goldens" / "greedy_tiny_qwen35.json"
TIE = 0.02


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_files(tmp_path_factory.mktemp("qwen35-golden"))


def _golden(files, arch) -> list[dict]:
    golden = json.loads(GOLDEN.read_text())[arch]
    assert hashlib.sha256(files[arch].read_bytes()).hexdigest() == golden["sha256"], \
        "the tiny file changed: write the golden again (benchmarks/make_qwen35_golden.py)"
    return golden["cases"]


@pytest.mark.parametrize("arch", list(FILES))
def test_greedy_equals_llamacpps(files, arch):
    cases = _golden(files, arch)
    llm = LLM(str(files[arch]), progress=False, max_num_batched_tokens=8)
    outs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS],
                        SamplingParams(temperature=0, max_tokens=NEW, ignore_eos=True))
    for out, case in zip(outs, cases):
        n = next((i for i, m in enumerate(case["margins"]) if m < TIE), NEW)  # up to the first near-tie
        assert list(out.outputs[0].token_ids)[:n] == case["tokens"][:n]


@pytest.mark.parametrize("arch", list(FILES))
def test_teacher_forced_top1_is_llamacpps(files, arch):
    cases = _golden(files, arch)
    llm = LLM(str(files[arch]), progress=False, max_num_batched_tokens=8)
    outs = llm.generate([{"prompt_token_ids": p + c["tokens"]} for p, c in zip(PROMPTS, cases)],
                        SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=1))
    checked = 0
    for out, prompt, case in zip(outs, PROMPTS, cases):
        ranks = out.prompt_ranks[len(prompt):]  # golden token i's rank after the prompt and tokens before it
        for rank, margin in zip(ranks, case["margins"]):
            if margin >= TIE:
                assert rank == 1
                checked += 1
    assert checked >= 30, checked  # 3 x 16 steps less the near-ties
