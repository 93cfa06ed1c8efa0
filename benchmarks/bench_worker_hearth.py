"""hearth side of bench_vs_llamacpp.py; runs under hearth's venv (/work/main/.venv/bin/python).

Speaks bench_proc's line protocol in its own process. hearth is timed through its public API:
prefill = generate(max_tokens=1); decode = (t(max_tokens=1+n) - t(max_tokens=1)) / n. Every call
gets a fresh prompt (the parent sends distinct seeded ids), so no prefix-cache hit can shorten a
measured prefill.
"""

from __future__ import annotations

import sys
import time

import hearth
from hearth import LLM, SamplingParams
from hearth.layers import huge_pages

from bench_proc import log, serve


def generate_seconds(llm: LLM, ids: list[int], max_tokens: int) -> float:
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    t0 = time.perf_counter()
    outs = llm.generate([{"prompt_token_ids": ids}], params)
    dt = time.perf_counter() - t0
    got, cached = len(outs[0].outputs[0].token_ids), outs[0].num_cached_tokens
    if got != max_tokens or cached:
        sys.exit(f"hearth returned {got}/{max_tokens} tokens with {cached} prompt tokens cached")
    return dt


def load(job: dict) -> LLM:
    return LLM(job["model"], threads=job["threads"])


def warmup(llm: LLM, job: dict) -> None:
    t0 = time.perf_counter()
    huge_pages.wait()  # the weights' move into 2 MB pages, in the background after the load: speeds after it
    log("hearth", f"weights moved {time.perf_counter() - t0:.2f} s after the load")
    generate_seconds(llm, job["warmup"], 9)


def run(llm: LLM, prefill_ids: list[int], decode_ids: list[int], n: int) -> tuple[float, float]:
    t_first = generate_seconds(llm, prefill_ids, 1)
    t_all = generate_seconds(llm, decode_ids, 1 + n)
    # both prompts have the same length, so t_first stands in for the decode run's own prefill
    return len(prefill_ids) / t_first, n / max(t_all - t_first, 1e-9)


if __name__ == "__main__":
    serve("hearth", load, warmup, run, f"hearth {getattr(hearth, '__version__', '?')}")
