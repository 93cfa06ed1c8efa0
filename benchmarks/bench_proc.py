"""The worker side of bench_vs_llamacpp.py's line protocol; stdlib only, so both engines' venvs
can import it.

stdin line 1: the job {"model", "threads", "decode_tokens", "warmup": ids}. The worker loads the
model, warms up and answers {"event": "ready", "load_s"}. Each further stdin line
{"prefill_ids", "decode_ids"} is one repeat, answered {"event": "run", "prefill_tok_s",
"decode_tok_s"}. At EOF it answers {"event": "done", "peak_rss_mb", "version"} and exits.
Keeping workers alive lets the parent interleave the engines' repeats, so load from other
processes on shared cores hits both alike.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Callable


def peak_rss_mb() -> float:
    """This process's own high-water RSS in MB. (getrusage's ru_maxrss would carry over the parent's
    peak across fork+exec.) Memory-mapped weight pages count once touched."""
    with open("/proc/self/status") as fh:
        kib = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
    return kib / 1024


def emit(msg: dict) -> None:
    print(json.dumps(msg, default=str), flush=True)


def log(engine: str, msg: str) -> None:
    print(f"    [{engine}] {msg}", file=sys.stderr, flush=True)


def serve(engine: str, load: Callable[[dict], Any], warmup: Callable[[Any, dict], None],
          run: Callable[[Any, list[int], list[int], int], tuple[float, float]], version: str) -> None:
    """load(job) -> state; warmup(state, job); run(state, prefill_ids, decode_ids, n) -> (prefill
    tok/s, decode tok/s)."""
    job = json.loads(sys.stdin.readline())
    t0 = time.perf_counter()
    state = load(job)
    load_s = time.perf_counter() - t0
    log(engine, f"loaded in {load_s:.2f} s; warming up")
    warmup(state, job)
    emit({"event": "ready", "load_s": load_s})
    for i, line in enumerate(sys.stdin):
        req = json.loads(line)
        prefill, decode = run(state, req["prefill_ids"], req["decode_ids"], job["decode_tokens"])
        log(engine, f"repeat {i + 1}: prefill {prefill:.1f} tok/s, decode {decode:.1f} tok/s")
        emit({"event": "run", "prefill_tok_s": prefill, "decode_tok_s": decode})
    emit({"event": "done", "engine": engine, "version": version, "peak_rss_mb": peak_rss_mb()})
