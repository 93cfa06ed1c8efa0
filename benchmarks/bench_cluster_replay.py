"""Routing replayed through the real engine bookkeeping, without a model: deterministic hit rates.

The shared-prefix workload's prompts (this model's tokens, as `bench_cluster.py` sends them) go
through each router (`hearth/cluster/router.py`, the in-flight counts as the front end keeps them)
to N replicas that are each hearth's own Scheduler + KVCacheManager (the prefix cache, the
free-block LRU, preemption, chunked prefill, waiting for a prefix another request is computing),
with a runner that computes nothing and answers token 0 (`--max-tokens` of them). C clients keep one
request each in flight, in the workload's order. The clock: a replica's step takes
`STEP_S + tokens / PREFILL_TOK_S` (SmolLM2 on one loaded thread, roughly); the replica whose step
ends first goes next, and a client sends its next request when its last one finished. Same input,
same numbers: where the served benchmark's hit rates move by a few points from run to run (timing),
this one does not, so it can show what one change does.

    .venv/bin/python benchmarks/bench_cluster_replay.py [--levels 8,32] [--kv-fractions ...] [--no-wait]

--no-wait replays the scheduler as it was before a request waited for blocks another request is
computing (both compute them): the difference that change makes, everything else equal.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import bench_cluster  # same folder: the workload's prompts and working set

from hearth.cluster.router import ReplicaLoad, make_router
from hearth.engine.kv_cache_manager import KVCacheManager
from hearth.engine.request import Request
from hearth.engine.scheduler import Scheduler
from hearth.kvstore.block_hash import root_hash
from hearth.runner.messages import RunnerOutput, SampledToken, SchedulerOutput
from hearth.sampling_params import SamplingParams

STEP_S = 0.025
"""A step's fixed cost (a SmolLM2 decode step on one thread)."""
PREFILL_TOK_S = 400.0
"""Tokens a step computes per second beyond that."""
BLOCK = 16


class NullRunner:
    def execute(self, so: SchedulerOutput) -> RunnerOutput:
        return RunnerOutput({s.request_id: SampledToken(0) for s in so.seqs if s.sample})


@dataclass
class Replica:
    sched: Scheduler
    clock: float = 0.0
    in_flight: dict[str, int] = field(default_factory=dict)
    """request id -> client."""


def replay(prompts: list[list[int]], routing: str, replicas: int, blocks: int, clients: int, args) -> float:
    """Prompt-token hit rate, summed over the replicas' prefix-cache counters."""
    root = root_hash(b"replay")
    router = make_router(routing, replicas, root=root, block_size=BLOCK, load_factor=args.load_factor)
    cap = args.max_num_seqs + args.max_queued
    reps = [Replica(Scheduler(KVCacheManager(blocks, BLOCK, cache_key=b"replay"), args.max_num_seqs, 2048))
            for _ in range(replicas)]
    runner, params, now, sent = NullRunner(), SamplingParams(max_tokens=args.max_tokens, temperature=0), 0.0, 0

    def send(client: int) -> None:
        nonlocal sent
        ids = prompts[sent]
        i = router.pick(ids, [ReplicaLoad(True, len(r.in_flight), cap) for r in reps])
        r = reps[i]
        rid = f"q{sent}"
        r.sched.add(Request(rid, ids, params, frozenset(), 4096))
        r.in_flight[rid] = client
        r.clock = max(r.clock, now)
        sent += 1

    for c in range(min(clients, len(prompts))):
        send(c)
    while any(r.in_flight for r in reps):
        r = min((r for r in reps if r.in_flight), key=lambda r: r.clock)
        so = r.sched.schedule()
        if not so.seqs and not r.sched.running:
            raise SystemExit(f"{blocks} KV blocks cannot hold one prompt: give a larger --kv-fractions")
        changed = r.sched.update(so, runner.execute(so))
        r.clock += STEP_S + sum(len(s.token_ids) for s in so.seqs) / PREFILL_TOK_S
        now = r.clock
        for req in (req for req, _ in changed if req.status.finished):
            client = r.in_flight.pop(req.request_id, None)
            if client is not None and sent < len(prompts):
                send(client)
    queries = sum(r.sched.kv.stats.queries for r in reps)
    return sum(r.sched.kv.stats.hits for r in reps) / max(queries, 1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--levels", default="8,32", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--requests", type=int, default=96)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--kv-fractions", default="0.125,0.25,0.5,1,2", type=lambda s: [float(x) for x in s.split(",")])
    p.add_argument("--load-factor", type=float, default=1.5)
    p.add_argument("--max-num-seqs", type=int, default=16)
    p.add_argument("--max-queued", type=int, default=256)
    p.add_argument("--no-wait", action="store_true", help="the scheduler before it waited for blocks being computed")
    args = p.parse_args()
    if args.no_wait:
        Scheduler._next_block_in = lambda self, req, num_cached, computing: False
    prompts = bench_cluster.workload_prompts(args)
    working = bench_cluster.working_set_blocks(prompts)
    print(f"workload: {len(prompts)} prompts, {sum(map(len, prompts)):,} tokens, working set {working} blocks")
    print("| KV blocks a replica (of the working set) | clients | prefix | round-robin | ratio |")
    print("|---|---|---|---|---|")
    for f in args.kv_fractions:
        blocks = round(f * working)
        for c in args.levels:
            rate = {rt: replay(prompts, rt, args.replicas, blocks, c, args) for rt in ("prefix", "round-robin")}
            print(f"| {blocks} ({f:g}) | {c} | {rate['prefix']:.0%} | {rate['round-robin']:.0%} | "
                  f"{rate['prefix'] / max(rate['round-robin'], 1e-9):.2f}x |", flush=True)


if __name__ == "__main__":
    main()
