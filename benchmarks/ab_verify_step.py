"""Whole verify steps of two builds of the selected tier's kernel library in one process: this checkout's
and another checkout's (the reference, e.g. main's worktree or an exported commit). One model loaded
twice, each copy built on its own library; one sequence after --ctx cached tokens, a step of R rows
(its next token and R - 1 drafts, greedy) through ModelRunner._run, every row count in turn, the two
libraries alternating (order swapped each round), CPU time of the calling thread (`time.thread_time`:
what a shared machine leaves it), medians and the median of the per-round ratios. The two steps'
outputs are compared too (a kernel change meant to keep the bits must keep the accepted tokens).

    HEARTH_CPU_TIER=avx512 OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/ab_verify_step.py REF \
        --rows 1 2 4 8 16 --rounds 9
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # ab_native_gemm, beside this file
from ab_native_gemm import reference_library  # noqa: E402

from hearth.kernels import fused_layer, native  # noqa: E402
from hearth.llm import LLM  # noqa: E402
from hearth.runner.messages import ScheduledSequence, SchedulerOutput  # noqa: E402
from hearth.sampling_params import SamplingParams  # noqa: E402


def seq(tokens: list[int], start: int, drafts: list[int], blocks: list[int], last: bool = True) -> SchedulerOutput:
    return SchedulerOutput([ScheduledSequence("r", tokens, start, blocks, last, SamplingParams(temperature=0.0),
                                              [], spec_token_ids=drafts)])


class Side:
    """One model on one kernel library: native's module-level calls (attention, batch_invariant) go to
    that library while the side runs (its layers hold theirs)."""

    def __init__(self, so, model: str, prompt: list[int], ctx: int):
        self.so = so
        native._lib = so
        fused_layer._declared = False  # its signatures, declared on the library it first meets
        self.llm = LLM(model, progress=False, enable_prefix_caching=False, threads=1)
        self.runner = self.llm.runner
        self.blocks = list(range(-(-len(prompt) // self.runner.block_size) + 1))
        for c in range(0, ctx, 256):  # the context's K/V, in prefill chunks
            self.runner._run(seq(prompt[c:min(ctx, c + 256)], c, [], self.blocks, c + 256 >= ctx))

    def step(self, so: SchedulerOutput) -> tuple[float, object]:
        native._lib = self.so
        t = time.thread_time()
        out = self.runner._run(so)
        return time.thread_time() - t, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reference", type=Path, help="the other checkout's root")
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--ctx", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    torch.set_num_threads(1)
    mine = native.lib()
    ref = reference_library(args.reference)
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(100, 20000, (args.ctx + max(args.rows),), generator=g).tolist()
    sides = [Side(ref, args.model, prompt, args.ctx), Side(mine, args.model, prompt, args.ctx)]
    times: dict[int, list[list[float]]] = {R: [[], []] for R in args.rows}
    differ = set()
    for rnd in range(args.rounds + 1):  # round 0 warms up (pages, caches), not counted
        for R in args.rows:
            so = seq([prompt[args.ctx]], args.ctx, prompt[args.ctx + 1:args.ctx + R], sides[0].blocks)
            order = (0, 1) if rnd % 2 else (1, 0)
            got = {i: sides[i].step(so) for i in order}
            if [(repr(o.sampled), repr(o.accepted)) for _, o in (got[0], got[1])] != [(repr(got[0][1].sampled), repr(got[0][1].accepted))] * 2:
                differ.add(R)
            if rnd:
                for i in (0, 1):
                    times[R][i].append(got[i][0])
    print("| rows | reference ms | this ms | this / reference | per row past 1, x a 1-row step (ref -> this) |")
    print("|---|---|---|---|---|")
    one = [statistics.median(times[args.rows[0]][i]) for i in (0, 1)]
    for R in args.rows:
        ref_t, this_t = (statistics.median(times[R][i]) for i in (0, 1))
        ratio = statistics.median(b / a for a, b in zip(*times[R]))
        extra = "" if R == 1 else f"{(ref_t - one[0]) / (R - 1) / one[0]:.2f} -> {(this_t - one[1]) / (R - 1) / one[1]:.2f}"
        print(f"| {R} | {ref_t * 1e3:.1f} | {this_t * 1e3:.1f} | {ratio:.3f} | {extra} |")
    if differ:
        print(f"outputs differ at rows {sorted(differ)}")


if __name__ == "__main__":
    main()
