"""Where a single-stream decode step goes, and the one-call layer stack against the layers one call each,
in one process: generate calls alternate between the two (the decode stack off: FusedStack.decode
declines, so every layer runs its own C++ call, as before 2026-12-05), so a shared machine's load hits
both alike. Per step (steps after each call's first two): wall and thread-CPU time of EngineCore.step,
and the wall time of the model's forward (the layers), the head (compute_logits) and the sampler; the
rest is the engine's and runner's Python. With --threads 1 the CPU time is the load-proof figure.
Usage (from the checkout's root, hearth's venv; PYTHONPATH=. so this checkout's hearth runs):

    HEARTH_CPU_TIER=avx512 python benchmarks/bench_decode_step.py qwen2.5-coder-1.5b --threads 2
    OMP_NUM_THREADS=1 python benchmarks/bench_decode_step.py qwen2.5-coder-0.5b --threads 1 --rounds 4
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import hearth.runner.model_runner as model_runner
from hearth import LLM, SamplingParams
from hearth.engine.engine_core import EngineCore
from hearth.kernels.fused_layer import FusedStack

PARTS = ("step", "forward", "head", "sample")
STACKED = FusedStack.decode  # the one-call stack; the A/B swaps it for "decline"


def instrument(llm: LLM, times: dict[str, list[tuple[float, float]]]) -> None:
    """(wall, thread CPU) timers around the step, the model's forward, the head and the sampler."""
    def wrap(owner, name: str, key: str):
        fn = getattr(owner, name)

        def timed(*args, **kwargs):
            t0, c0 = time.perf_counter(), time.thread_time()
            out = fn(*args, **kwargs)
            times[key].append((time.perf_counter() - t0, time.thread_time() - c0))
            return out
        setattr(owner, name, timed)

    wrap(EngineCore, "step", "step")
    wrap(type(llm.model), "forward", "forward")
    wrap(type(llm.model), "compute_logits", "head")
    wrap(model_runner, "sample", "sample")


def one_call(llm: LLM, ids: list[int], tokens: int, stacked: bool, times: dict) -> list[int]:
    FusedStack.decode = STACKED if stacked else (lambda *a: 0)
    for v in times.values():
        v.clear()
    out = llm.generate([{"prompt_token_ids": ids}], SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True))
    return out[0].outputs[0].token_ids


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5, help="generate calls per mode (after one warm-up round)")
    ap.add_argument("--tokens", type=int, default=48, help="new tokens per call")
    ap.add_argument("--prompt-tokens", type=int, default=64)
    args = ap.parse_args()
    llm = LLM(args.model, threads=args.threads, progress=False, enable_prefix_caching=False)
    times = {k: [] for k in PARTS}
    instrument(llm, times)
    rng, got = random.Random(0), {m: {k: [] for k in PARTS} for m in ("layers", "stack")}
    same = True
    for r in range(args.rounds + 1):
        ids = [rng.randrange(1000, 30000) for _ in range(args.prompt_tokens)]
        tokens = {}
        for mode in (("layers", "stack") if r % 2 == 0 else ("stack", "layers")):
            tokens[mode] = one_call(llm, ids, args.tokens, mode == "stack", times)
            for k in PARTS * (r > 0):
                got[mode][k] += times[k][2:]  # the prefill and the first decode step left out
        same &= tokens["layers"] == tokens["stack"]
    FusedStack.decode = STACKED
    report(got, args, same)


def report(got: dict, args: argparse.Namespace, same: bool) -> None:
    """Medians a step, wall and thread CPU; rest: the step less its forward, head and sampler, step by step."""
    load = open("/proc/loadavg").read().split()[:3]
    print(f"{args.model}, {args.threads} thread(s), {args.rounds} x {args.tokens} tokens a mode, "
          f"load average {' '.join(load)}; same tokens both ways: {same}")
    print(f"{'median ms a step':22s} " + " ".join(f"{k:>9s}" for k in (*PARTS, "rest")))
    for clock, c in (("wall", 0), ("thread CPU", 1)):
        for mode, t in got.items():
            cols = [[x[c] for x in t[k]] for k in PARTS]
            rest = [st - f - h - sa for st, f, h, sa in zip(*cols)]
            print(f"{mode + ', ' + clock:22s} " + " ".join(f"{statistics.median(v) * 1e3:9.3f}" for v in (*cols, rest)))
    for clock, c in (("wall", 0), ("thread CPU", 1)):
        a, b = (statistics.median(x[c] for x in got[m]["step"]) for m in ("layers", "stack"))
        print(f"stack / layers, step median, {clock}: {b / a:.3f}")


if __name__ == "__main__":
    main()
