"""Whole batched decode steps of two builds of the selected tier's kernel library in one process: this
checkout's and another checkout's (the reference, e.g. main's worktree or an exported commit). One
model loaded twice, each copy built on its own library, each with its own engine given the same N
distinct prompts (random ids, greedy, EOS ignored); after both prefills, engine steps alternate
(order swapped each step), CPU time of the calling thread (`time.thread_time`: what a shared machine
leaves it), medians of the steps where all N sequences decode and of the per-step ratios, and the two
engines' tokens compared (a change meant to keep the bits must keep them). --torch-max: the reference
side samples greedy rows with torch's max instead of sampler.first_max (the 2026-12-06 sampler).

    HEARTH_CPU_TIER=avx512 OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/ab_batch_step.py REF \
        --seqs 16 --steps 60 --rounds 3
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # ab_native_gemm, beside this file
from ab_native_gemm import reference_library  # noqa: E402

import hearth.sample.sampler as sampler  # noqa: E402
from hearth.kernels import fused_layer, native  # noqa: E402
from hearth.llm import LLM  # noqa: E402
from hearth.sampling_params import SamplingParams  # noqa: E402

FIRST_MAX = sampler.first_max


class Side:
    """One model and engine on one kernel library: native's module-level calls go to that library
    while the side runs (its layers and matmuls hold theirs)."""

    def __init__(self, name: str, so, args: argparse.Namespace):
        self.name, self.so, self.torch_max = name, so, args.torch_max and name == "reference"
        native._lib = so
        fused_layer._declared = False  # its signatures, declared on the library it first meets
        self.llm = LLM(args.model, progress=False, enable_prefix_caching=False, threads=args.threads, max_num_seqs=args.seqs,
                       max_model_len=args.prompt + args.steps + 16, max_num_batched_tokens=512)
        self.engine, self.times, self.tokens = self.llm.engine, [], {}

    def step(self, record: bool) -> list:
        native._lib = self.so
        sampler.first_max = (lambda x: x.max(-1).indices) if self.torch_max else FIRST_MAX
        t = time.thread_time()
        outs = self.engine.step()
        if record:
            self.times.append(time.thread_time() - t)
        for o in outs:
            self.tokens.setdefault(o.request_id.split("/")[1], []).extend(o.new_token_ids)
        return outs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reference", type=Path, help="the other checkout's root")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--seqs", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=256, help="tokens a prompt")
    ap.add_argument("--steps", type=int, default=60, help="decode steps a round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="OpenMP threads (CPU time is the calling thread's: at 2 "
                    "threads it counts that thread's waits at barriers as well, a proxy of the step's wall time)")
    ap.add_argument("--torch-max", action="store_true", help="the reference samples with torch's max")
    args = ap.parse_args()
    mine = native.lib()
    sides = [Side("reference", reference_library(args.reference), args), Side("this", mine, args)]
    same = True
    for rnd in range(args.rounds):
        rng = random.Random(rnd)
        prompts = [[rng.randrange(1000, 30000) for _ in range(args.prompt)] for _ in range(args.seqs)]
        params = SamplingParams(temperature=0, max_tokens=args.steps + 2, ignore_eos=True)
        for s in sides:
            s.tokens = {}
            for i, p in enumerate(prompts):
                s.engine.add_request(p, params, request_id=f"{rnd}/{i}")
            while len(s.tokens) < args.seqs:  # the prefill chunks, until every sequence has its first token
                s.step(False)
        for k in range(args.steps):
            for s in (sides if k % 2 else sides[::-1]):
                s.step(k >= 2)
        for s in sides:
            while s.engine.has_unfinished():
                s.step(False)
        same &= sides[0].tokens == sides[1].tokens
    ref, this = (s.times for s in sides)
    load = open("/proc/loadavg").read().split()[:3]
    print(f"{args.model}, {args.seqs} sequences, {len(this)} steps each, load average {' '.join(load)}; "
          f"same tokens: {same}")
    print(f"median step CPU ms: reference {statistics.median(ref) * 1e3:.2f}, this {statistics.median(this) * 1e3:.2f}"
          f" ({statistics.median(this) / statistics.median(ref):.3f}x); median of step ratios "
          f"{statistics.median(b / a for a, b in zip(ref, this)):.3f}")


if __name__ == "__main__":
    main()
