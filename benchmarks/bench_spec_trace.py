"""Speculation on one workload in-process, timed by a fixed step-cost model instead of the clock (issue
19, point 7, on a machine too loaded to time): each variant's greedy run on one LLM, the policy fed
the model's time of every decode step it measures (so it learns costs by trying lengths, as it does
from the clock, without the noise), and the run priced as the sum of its decode steps' modeled times.
Reports per variant: steps, tokens per step (acceptance length), rows per step, the modeled speed-up
over plain, the wall-clock one (noisy), and whether the text equals plain's.

The default model is Qwen2.5-Coder-1.5B's verify steps on a quiet AMX machine, 2 threads
(docs/speculative.md, 2026-12-03: ms per step by rows; 10-16 rows one pass of the exact AMX tiles,
then up to 8 more rows on the GEMV, 25-32 two passes, and so on):

    .venv/bin/python benchmarks/bench_spec_trace.py --workload code-edit \\
        --variants '{"ngram8": {"method": "ngram", "num_speculative_tokens": 8}, "ngram31": {"method": "ngram", "num_speculative_tokens": 31}}'

--replay: the model runs plain greedy once; a variant whose proposer reads only the text (ngram,
suffix) is then replayed without it: its policy and proposer stepped over plain greedy's tokens,
each draft accepted as far as it matches them (what the engine does, speculation being lossless),
in a second instead of a model run (no wall-clock column, and no repeat: the suffix tries would
need the engine's request lifecycle).
"""

from __future__ import annotations

import argparse
import bisect
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's hearth
from hearth.bench.spec import prompts  # noqa: E402
from hearth.engine.request import Request  # noqa: E402
from hearth.llm import LLM  # noqa: E402
from hearth.sampling_params import SamplingParams  # noqa: E402
from hearth.spec_decode.config import SpeculativeConfig  # noqa: E402
from hearth.spec_decode.cost import StepCost  # noqa: E402
from hearth.spec_decode.policy import DraftOutcome, SpeculativeDecoder  # noqa: E402
from hearth.spec_decode.thresholds import POLICY  # noqa: E402
from hearth.spec_decode.tree import DraftTree  # noqa: E402

# rows -> ms of a step: below the tiles the GEMV (linear between these); from 10 rows passes of 16 on
# the exact tiles, up to 8 rows past a multiple of 16 on the GEMV instead (costing what those rows
# add to a decode step), more on another pass
GEMV_MS = {1: 46.8, 4: 66.7, 9: 137.3}
TILE_MS = {1: 132.3, 2: 251.3, 3: 371.3, 4: 514.3}


def gemv_ms(rows: int) -> float:
    keys = sorted(GEMV_MS)
    i = bisect.bisect_left(keys, rows)
    if keys[i] == rows:
        return GEMV_MS[rows]
    lo, hi = keys[i - 1], keys[i]
    return GEMV_MS[lo] + (GEMV_MS[hi] - GEMV_MS[lo]) * (rows - lo) / (hi - lo)


def modeled_ms(rows: int, tail: int = 8) -> float:
    if rows < 10:
        return gemv_ms(rows)
    passes, extra = divmod(rows, 16)
    if extra and passes and extra <= tail:
        return TILE_MS[min(4, passes)] + gemv_ms(extra + 1) - gemv_ms(1)
    return TILE_MS[min(4, passes + bool(extra))]


TAIL = 8  # --tail: the kernels' EXACT_TAIL_ROWS (0: every pass on the tiles, before 2026-12-05)


class ModelCost(StepCost):
    """The policy's cost table, fed the model's time of each step it measures, not the clock's."""

    def add(self, rows: int, seconds: float) -> None:
        super().add(rows, modeled_ms(rows, TAIL) / 1e3)


def run(llm: LLM, ids: list[int], max_tokens: int, spec: SpeculativeDecoder | None, prefix: str) -> dict:
    steps: list[int] = []
    timed = spec.timed if spec is not None else None
    if spec is not None:
        spec.timed = lambda rows, s: (steps.append(rows), timed(rows, s))
    llm.engine.spec = spec
    t = time.perf_counter()
    out = llm.generate({"prompt_token_ids": ids}, SamplingParams(temperature=0.0, max_tokens=max_tokens))[0]
    wall = time.perf_counter() - t
    toks = out.outputs[0].token_ids
    n_steps = len(steps) if spec is not None else len(toks)
    # decode steps only (the first token comes with the prompt's prefill)
    ms = sum(modeled_ms(r, TAIL) for r in steps) if spec is not None else modeled_ms(1) * (len(toks) - 1)
    return {"name": prefix, "tokens": len(toks) - 1, "steps": n_steps, "ms": ms, "wall": wall, "text": toks,
            "rows": sum(steps) / max(1, len(steps)) if steps else 1.0}


def replay(ids: list[int], plain: list[int], spec: SpeculativeDecoder, prefix: str) -> dict:
    """The engine's loop for one greedy request (propose, verify against plain's tokens, time,
    observe), without the model: a chain's drafts accepted while they equal plain's next tokens, a
    tree's along the branch that does."""
    spec.propose([], 1)  # the prompt's step: nobody decodes yet
    req = Request("r", ids, SamplingParams(temperature=0.0), frozenset(), len(ids) + len(plain))
    at, steps = 1, []  # plain[0] comes with the prompt's prefill
    while at < len(plain):
        req.output_token_ids[:] = plain[:at]
        draft = spec.propose([req], 1).get("r") or []
        tokens, parents = (draft.tokens, draft.parents) if isinstance(draft, DraftTree) else (list(draft), [])
        accepted, node = [], -1
        while at + len(accepted) < len(plain):  # a chain is a tree whose node j's parent is j - 1
            want = plain[at + len(accepted)]
            node = next((c for c, t in enumerate(tokens) if t == want and (parents[c] if parents else c - 1) == node), None)
            if node is None:
                break
            accepted.append(want)
        rows = 1 + len(tokens)
        spec.timed(rows, 0.0)
        if tokens:
            spec.observe([DraftOutcome.of("r", tokens, parents, accepted)])
        steps.append(rows)
        at += len(accepted) + 1
    ms = sum(modeled_ms(r, TAIL) for r in steps)
    return {"name": prefix, "tokens": len(plain) - 1, "steps": len(steps), "ms": ms, "wall": None,
            "text": plain, "rows": sum(steps) / len(steps)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--workload", default="code-edit")
    ap.add_argument("--variants", default='{"ngram": {"method": "ngram", "num_speculative_tokens": 8}}')
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--repeat", action="store_true", help="also each variant's second run of the same request")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--tail", type=int, default=8, help="rows past 16k on the GEMV (0: the kernels before 2026-12-05)")
    ap.add_argument("--replay", action="store_true", help="ngram and suffix variants replayed over plain's tokens")
    args = ap.parse_args()
    global TAIL
    TAIL = args.tail
    llm = LLM(args.model, progress=False, enable_prefix_caching=False, threads=args.threads)
    ids = llm.encode_chat(list(prompts.spec_prompt(args.workload).messages))
    plain = run(llm, ids, args.max_tokens, None, "plain")
    print(f"{args.workload}, {len(ids)} prompt tokens, plain {plain['tokens']} tokens")
    print("| variant | steps | tokens / step | rows / step | modeled x plain | wall x plain | = plain |")
    print("|---|---|---|---|---|---|---|")
    report(plain, plain)
    for name, cfg in json.loads(args.variants).items():
        spec = SpeculativeDecoder(SpeculativeConfig(**cfg), ModelCost(POLICY.draft_token_cost, passes=(10, 16, TAIL)),
                                  llm.tokenizer)
        if args.replay and spec.config.method in ("ngram", "suffix"):
            report(replay(ids, plain["text"], spec, name + " (replayed)"), plain)
            continue
        report(run(llm, ids, args.max_tokens, spec, name), plain)
        if args.repeat:
            report(run(llm, ids, args.max_tokens, spec, name + " repeat"), plain)


def report(r: dict, plain: dict) -> None:
    """One row of the table, printed as soon as its run ends."""
    print(f"| {r['name']} | {r['steps']} | {r['tokens'] / r['steps']:.2f} | {r['rows']:.1f} | "
          f"{r['tokens'] / r['ms'] / (plain['tokens'] / plain['ms']):.2f}x | "
          f"{'-' if r['wall'] is None else format(r['tokens'] / r['wall'] / (plain['tokens'] / plain['wall']), '.2f') + 'x'} | "
          f"{'yes' if r['text'] == plain['text'] else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
