"""Run a workload's levels on a client: each level is a closed loop of `concurrency` users, each
sending its next request as soon as its last one ends. Progress goes to stderr."""

from __future__ import annotations

import asyncio
import sys
import time

from tqdm import tqdm

from hearth.bench import BenchError
from hearth.bench.records import LevelRun
from hearth.bench.workloads import Level, Workload, warmup_request


async def _run_level(client, level: Level, desc: str, progress: bool) -> LevelRun:
    sem = asyncio.Semaphore(level.concurrency)
    bar = tqdm(total=len(level.requests), desc=desc, unit="req", file=sys.stderr, disable=not progress,
               leave=True, dynamic_ncols=True)
    tokens = 0

    async def one(req):
        nonlocal tokens
        async with sem:
            result = await client.send(req, level.concurrency)
        tokens += result.output_tokens
        bar.set_postfix_str(f"{tokens} tokens", refresh=False)
        bar.update(1)
        return result

    start = time.perf_counter()
    try:
        results = await asyncio.gather(*(one(r) for r in level.requests))
    finally:
        bar.close()
    return LevelRun(level.concurrency, list(results), start, time.perf_counter())


WARMUP_TOKENS = 4


async def _warmup(client, workload: Workload, count: int) -> None:
    """Untimed requests first, so one-time costs (lazy init, first kernels, connection setup) do
    not land in the first level's numbers."""
    for _ in range(count):
        result = await client.send(warmup_request(min(workload.max_tokens, WARMUP_TOKENS)), 1)
        if result.error:  # a server that cannot answer one request will not answer a workload
            raise BenchError(f"the warm-up request failed: {result.error}")


def _spec_counts(client) -> dict | None:
    """The client's spec-decode counters now, when it has them (the in-process engine does)."""
    read = getattr(client, "spec_counts", None)
    return read() if read is not None else None


async def _run(client, workload: Workload, progress: bool, warmup: int, memory) -> list[LevelRun]:
    await client.start(workload)
    runs = []
    try:
        await _warmup(client, workload, warmup)
        for level in workload.levels:
            if memory is not None:
                memory.start_level()
            before = _spec_counts(client)
            run = await _run_level(client, level, f"{workload.name} c={level.concurrency}", progress)
            run.peak_rss = memory.level_peak() if memory is not None else None
            after = _spec_counts(client)
            if before is not None and after is not None:
                run.spec = {k: after[k] - before[k] for k in after}
            errors = [r.error for r in run.results if r.error]
            if len(errors) == len(run.results):
                raise BenchError(f"every request at concurrency {level.concurrency} failed: {errors[0]}")
            runs.append(run)
    finally:
        await client.stop()
    return runs


def run_workload(client, workload: Workload, progress: bool = True, warmup: int = 1,
                 memory=None) -> list[LevelRun]:
    """client: start(workload), send(request, concurrency) -> RequestResult, stop() — all async.
    memory: a hearth.bench.rss.MemoryProbe of the measured process, or None."""
    return asyncio.run(_run(client, workload, progress, warmup, memory))
