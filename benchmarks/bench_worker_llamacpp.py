"""llama.cpp side of bench_vs_llamacpp.py; runs under /work/llamacpp-venv/bin/python.

Speaks bench_proc's line protocol in its own process, so its peak RSS is llama.cpp's alone.
Prefill = one `eval` of the prompt ids; decode = n single-token `eval`s, each after an argmax.
"""

from __future__ import annotations

import time

import llama_cpp
import numpy as np
from llama_cpp import Llama

from bench_proc import serve

N_CTX = 1024
N_BATCH = 512


def argmax_last(llm: Llama) -> int:
    # logits: [n_vocab] of the last evaluated position
    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return int(np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).argmax())


def prefill_seconds(llm: Llama, ids: list[int]) -> float:
    llm.reset()  # the next eval drops the KV cache past position 0
    t0 = time.perf_counter()
    llm.eval(ids)
    return time.perf_counter() - t0


def decode_seconds(llm: Llama, ids: list[int], n: int) -> float:
    """Prefill (untimed), then n single-token greedy steps (timed, argmax included)."""
    prefill_seconds(llm, ids)
    tok = argmax_last(llm)
    t0 = time.perf_counter()
    for _ in range(n):
        llm.eval([tok])
        tok = argmax_last(llm)
    return time.perf_counter() - t0


def load(job: dict) -> Llama:
    t = job["threads"]
    return Llama(job["model"], n_ctx=N_CTX, n_batch=N_BATCH, n_threads=t, n_threads_batch=t,
                 flash_attn=False, verbose=False)


def warmup(llm: Llama, job: dict) -> None:
    decode_seconds(llm, job["warmup"], 8)


def run(llm: Llama, prefill_ids: list[int], decode_ids: list[int], n: int) -> tuple[float, float]:
    prefill = len(prefill_ids) / prefill_seconds(llm, prefill_ids)
    return prefill, n / decode_seconds(llm, decode_ids, n)


if __name__ == "__main__":
    serve("llama.cpp", load, warmup, run, f"llama-cpp-python {llama_cpp.__version__}")
