"""hearth side of bench_batching.py; runs under hearth's venv (/work/main/.venv/bin/python).

One `hearth.LLM(max_num_seqs=N)`; all N requests are added to its engine at once and the engine is
stepped by hand (what `LLM.generate` does), taking a timestamp after every step, so
bench_batching.py can split prefill from decode exactly as for llama.cpp. The scheduler's own token
budget (max_num_batched_tokens, the same number as llama.cpp's n_batch) mixes prompt chunks and
decodes.
"""

from __future__ import annotations

import itertools
import sys
import time

import hearth
from hearth import LLM, SamplingParams
from hearth.layers import huge_pages

from bench_batching import serve_worker

_ids = itertools.count()


def load(job: dict) -> LLM:
    llm = LLM(job["model"], threads=job["threads"], max_num_seqs=job["n_seqs"],
              max_model_len=job["ctx_per_seq"], max_num_batched_tokens=job["max_batched_tokens"], progress=False)
    huge_pages.wait()  # the weights' move into 2 MB pages, in the background after the load: speeds after it
    return llm


def run(llm: LLM, prompts: list[list[int]], max_tokens: int) -> dict:
    engine = llm.engine
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    preempted = engine.scheduler.num_preemptions
    t0 = time.perf_counter()
    rids = [engine.add_request(ids, params, request_id=f"b{next(_ids)}") for ids in prompts]
    outs = {rid: [] for rid in rids}
    first, steps, cached = {}, [], 0
    while engine.has_unfinished():
        step = engine.step()
        t = time.perf_counter() - t0
        for out in step:
            if not outs[out.request_id]:
                first[out.request_id] = t
                cached += out.num_cached_tokens
            outs[out.request_id].extend(out.new_token_ids)
        steps.append((t, sum(len(out.new_token_ids) for out in step)))
    if cached:  # a prefix-cache hit would shorten prefill: the prompts must be fresh
        sys.exit(f"hearth found {cached} prompt tokens in its prefix cache; prompts are not distinct")
    return {"first_token_s": [first.get(r, t) for r in rids], "steps": steps,
            "outputs": [outs[r] for r in rids],
            "preemptions": engine.scheduler.num_preemptions - preempted}


if __name__ == "__main__":
    serve_worker("hearth", load, run, f"hearth {getattr(hearth, '__version__', '?')}")
