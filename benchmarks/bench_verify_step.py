"""Where a verify step's time goes (issue 19, point 7): one sequence after --ctx cached tokens, a step
of R rows (its next token and R - 1 drafts, greedy) through ModelRunner._run, against its parts timed
alone with the same inputs: each kind of linear (summed over the layers, exact tiles as in a verify
step), attention, the lm head, the runner's verify (acceptance) and its batch preparation. "rest" is
the step minus the parts (norms, rope, K/V writes, the fused layer's glue, Python). Every row count is
measured in turn, round after round (interleaved), medians.

    .venv/bin/python benchmarks/bench_verify_step.py --rows 1 4 8 16 17 24 32 --ctx 400 --rounds 7 [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's hearth
from hearth.kernels import native  # noqa: E402
from hearth.kernels.attention import paged_attention  # noqa: E402
from hearth.llm import LLM  # noqa: E402
from hearth.runner.messages import ScheduledSequence, SchedulerOutput  # noqa: E402
from hearth.sampling_params import SamplingParams  # noqa: E402

KINDS = ("qkv", "o", "gate_up", "down")


def seq(tokens: list[int], start: int, drafts: list[int], blocks: list[int]) -> SchedulerOutput:
    return SchedulerOutput([ScheduledSequence("r", tokens, start, blocks, True, SamplingParams(temperature=0.0),
                                              [], spec_token_ids=drafts)])


def ms(fn, reps: int = 1) -> float:
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) * 1e3 / reps


def parts(runner, so: SchedulerOutput, R: int) -> dict[str, float]:
    """Each part of an R-row verify step timed alone, ms."""
    model = runner.model
    out: dict[str, float] = {}
    x = torch.randn(R, model.cfg.hidden_size) * 0.1
    xi = torch.randn(R, model.cfg.intermediate_size) * 0.1
    out["prepare"] = ms(lambda: runner._prepare(so))
    _, _, meta = runner._prepare(so)
    a = model.layers[0].attn
    q = torch.randn(R, a.heads, a.head_dim)
    with native.batch_invariant(runner.verify_rows if R > 1 else 0):
        for j, kind in enumerate(KINDS):
            xs = xi if kind == "down" else (torch.randn(R, a.q_size) * 0.1 if kind == "o" else x)
            out[kind] = sum(ms(lambda: layer.ops.mms[j](xs)) for layer in model.layers)
        out["attention"] = sum(ms(lambda: paged_attention(q, kv, meta, a.scale, 0, 0.0, a.precise_scores))
                               for kv in runner.kv_caches)
        logits = None

        def head():
            nonlocal logits
            logits = model.compute_logits(x).float()
        out["lm_head"] = ms(head)
    out["verify"] = ms(lambda: runner._verify(so.seqs, logits.clone()))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 4, 8, 16, 17, 24, 32])
    ap.add_argument("--ctx", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=0, help="0: every core (1 on a shared machine: steadier)")
    ap.add_argument("--no-parts", action="store_true", help="whole steps only")
    args = ap.parse_args()
    llm = LLM(args.model, progress=False, enable_prefix_caching=False, threads=args.threads)
    runner = llm.runner
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(100, 20000, (args.ctx + max(args.rows),), generator=g).tolist()
    bs = runner.block_size
    blocks = list(range(-(-len(prompt) // bs) + 1))
    for c in range(0, args.ctx, 256):  # the context's K/V, in prefill chunks
        runner._run(SchedulerOutput([ScheduledSequence("r", prompt[c:min(args.ctx, c + 256)], c, blocks,
                                                       c + 256 >= args.ctx, SamplingParams(temperature=0.0), [])]))
    print(f"verify_rows {runner.verify_rows}, batch_min_rows {runner.backend.batch_min_rows()}", file=sys.stderr)
    steps, comp = defaultdict(list), defaultdict(lambda: defaultdict(list))
    for rnd in range(args.rounds + 1):  # round 0 warms up (pages, caches), not counted
        for R in args.rows:
            so = seq([prompt[args.ctx]], args.ctx, prompt[args.ctx + 1:args.ctx + R], blocks)
            step = ms(lambda: runner._run(so))
            got = {} if args.no_parts else parts(runner, so, R)
            if rnd:
                steps[R].append(step)
                for k, v in got.items():
                    comp[R][k].append(v)
    names = [] if args.no_parts else ["prepare", *KINDS, "attention", "lm_head", "verify"]
    print("| rows | step | " + " | ".join(names + ["rest"] if names else []) + " | step / row |")
    print("|---" * (len(names) + 3 + bool(names)) + "|")
    for R in args.rows:
        step = statistics.median(steps[R])
        med = [statistics.median(comp[R][k]) for k in names]
        cells = [f"{v:.1f}" for v in med] + ([f"{step - sum(med):.1f}"] if names else [])
        print(f"| {R} | {step:.1f} | " + " | ".join(cells) + f" | {step / R:.1f} |")


if __name__ == "__main__":
    main()
