"""A decode step's time outside its two native calls, for two checkouts' Python (this one's and another's,
e.g. an exported commit), in alternating processes: what a change to the engine, runner or sampler moves.

Each process loads SmolLM2-135M (or --model), runs N greedy sequences (random 24-token prompts, EOS ignored,
prefill not timed) for 1 and for 16 sequences, and splits each decode step's CPU time (`time.thread_time`:
what a shared machine leaves the thread) into the two native calls (hk_stack_forward: every layer;
hk_linear: the head) and the rest; medians over 3 x (max_tokens - 1) steps. --no-kernels: the two calls
return at once (garbage tokens): the rest as it costs with the caches warm, against the real calls' weight
stream (docs/performance.md, "A decode step's work outside its kernels").

    HEARTH_CPU_TIER=avx512 OMP_NUM_THREADS=1 python benchmarks/ab_step_overhead.py /tmp/ref --rounds 7
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PARTS = ("step", "native", "rest")


def side(args: argparse.Namespace) -> None:
    """One process: {N: [step, native, rest] medians in ms} on stdout."""
    from hearth import LLM, SamplingParams
    from hearth.kernels import native

    llm = LLM(args.model, threads=1, max_num_seqs=max(args.seqs), progress=False)
    eng, lib, spent = llm.engine, native.lib(), [0.0]

    def timed(fn):
        def call(*a):
            t = time.thread_time()
            r = 0 if args.no_kernels else fn(*a)
            spent[0] += time.thread_time() - t
            return a[1] if args.no_kernels and fn is stack else r  # the stack's "layers run"
        return call
    stack = lib.hk_stack_forward
    lib.hk_stack_forward, lib.hk_linear = timed(stack), timed(lib.hk_linear)
    params = SamplingParams(temperature=0, max_tokens=args.max_tokens, ignore_eos=True)
    rng = random.Random(0)

    def run(n: int) -> list[tuple[float, float, float]]:
        for _ in range(n):
            eng.add_request([rng.randrange(100, 40000) for _ in range(24)], params)
        sched = eng.scheduler
        while any(r.num_computed_tokens < len(r.prompt_token_ids) for r in (*sched.running, *sched.waiting)):
            eng.step()  # prefill (and its first token): not timed
        steps = []
        while eng.has_unfinished():
            spent[0] = 0.0
            t = time.thread_time()
            eng.step()
            dt = time.thread_time() - t
            steps.append((dt, spent[0], dt - spent[0]))
        return steps
    for n in args.seqs:  # warm-up
        run(n)
    out = {}
    for n in args.seqs:
        steps = run(n) + run(n) + run(n)
        out[n] = [1e3 * statistics.median(s[k] for s in steps) for k in range(3)]
    print(json.dumps(out))


def compare(args: argparse.Namespace) -> None:
    """Alternating processes (reference first), then per N and part: medians and the ratio this / reference."""
    flags = ["--side", "--model", args.model, "--max-tokens", str(args.max_tokens), "--seqs", *map(str, args.seqs)]
    flags += ["--no-kernels"] if args.no_kernels else []
    got: dict[str, list[dict]] = {"reference": [], "this": []}
    for r in range(args.rounds):
        for name, root in (("reference", Path(args.reference)), ("this", REPO)):
            env = {**os.environ, "PYTHONPATH": str(root)}
            line = subprocess.run([sys.executable, __file__, *flags], env=env, cwd=root, capture_output=True,
                                  text=True, check=True).stdout.strip().splitlines()[-1]
            got[name].append(json.loads(line))
            print(f"round {r + 1} {name}: {line}", flush=True)
    for n in map(str, args.seqs):
        for k, part in enumerate(PARTS):
            a = [d[n][k] for d in got["reference"]]
            b = [d[n][k] for d in got["this"]]
            pairs = [y / x for x, y in zip(a, b)]
            print(f"{n:>2} sequences, {part:6}: reference {statistics.median(a):7.3f} ms, this {statistics.median(b):7.3f} ms,"
                  f" ratio {statistics.median(b) / statistics.median(a):.3f} (rounds' ratios {min(pairs):.3f}-"
                  f"{max(pairs):.3f}, median {statistics.median(pairs):.3f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reference", nargs="?", help="the other checkout's root (omitted: this one alone, one process)")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--seqs", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--no-kernels", action="store_true", help="the two native calls return at once")
    ap.add_argument("--side", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side or args.reference is None:
        side(args)
    else:
        compare(args)


if __name__ == "__main__":
    main()
