"""A/B of the native paged attention with row groups on and off (csrc/attention_tasks.h): a verify
step's rows of one sequence read each K/V block once, or each row on its own. Same bits either way
(tests/kernels/test_attention_rows.py); this measures the time, interleaved in one process (median
of --reps calls each, alternating), Qwen2.5-Coder-1.5B's attention shape by default.

    .venv/bin/python benchmarks/bench_attention_rows.py --rows 1 4 16 --ctx 512 2048 [--seqs 1 4] [--dtype bf16]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's hearth
from hearth.kernels import native  # noqa: E402
from hearth.kernels.attention import AttentionMetadata, paged_attention  # noqa: E402


def batch(q_lens: list[int], ctx_lens: list[int], bs: int, num_blocks: int, g: torch.Generator) -> AttentionMetadata:
    """Sequences with q_lens rows ending contexts of ctx_lens, their blocks drawn at random."""
    perm, tables, qsl = torch.randperm(num_blocks, generator=g).tolist(), [], [0]
    for n_q, ctx in zip(q_lens, ctx_lens):
        tables.append(perm[:-(-ctx // bs)])
        perm = perm[len(tables[-1]):]
        qsl.append(qsl[-1] + n_q)
    return AttentionMetadata(qsl, list(ctx_lens), tables, torch.zeros(qsl[-1], dtype=torch.long), bs)


def timed(fn, reps: int) -> tuple[float, float]:
    """Median ms of fn with row groups on, then off, the two alternating call by call."""
    on, off = [], []
    for _ in range(reps):
        for flag, acc in ((True, on), (False, off)):
            with native.row_groups(flag):
                t = time.perf_counter()
                fn()
                acc.append((time.perf_counter() - t) * 1e3)
    return statistics.median(on), statistics.median(off)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--ctx", type=int, nargs="+", default=[512, 2048])
    ap.add_argument("--seqs", type=int, nargs="+", default=[1])
    ap.add_argument("--tree", action="store_true", help="also a 16-node tree (and its root row) per context")
    ap.add_argument("--dtype", choices=["f16", "bf16"], default="f16")
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()
    dtype = torch.float16 if args.dtype == "f16" else torch.bfloat16
    heads, kvh, d, bs = args.heads, args.kv_heads, args.head_dim, 16
    g = torch.Generator().manual_seed(0)
    print(f"threads {torch.get_num_threads()}, heads {heads}, kv heads {kvh}, head_dim {d}, {args.dtype}")
    print("seqs rows   ctx   groups on   off    off/on")
    for s in args.seqs:
        for ctx in args.ctx:
            nb = s * (-(-ctx // bs)) + 4
            cache = torch.randn(2, nb, bs, kvh, d, generator=g).to(dtype)
            for rows in args.rows:
                meta = batch([rows] * s, [ctx] * s, bs, nb, g)
                q = torch.randn(rows * s, heads, d, generator=g)
                on, off = timed(lambda: paged_attention(q, cache, meta, d ** -0.5), args.reps)
                print(f"{s:4d} {rows:4d} {ctx:5d}   {on:8.3f} {off:8.3f}  {off / on:6.2f}x")
            if args.tree:
                parents = [-1, 0, 1, 2, 3, 4, 5, 6, -1, 8, 9, 10, 0, 12, 1, 14]  # two chains and side branches
                meta = batch([1 + len(parents)] + [1] * (s - 1), [ctx] * s, bs, nb, g)  # the tree at ctx - 16 ..
                meta.trees = {0: (1, parents)}
                q = torch.randn(meta.query_start_loc[-1], heads, d, generator=g)
                on, off = timed(lambda: paged_attention(q, cache, meta, d ** -0.5), args.reps)
                print(f"{s:4d} tree {ctx:5d}   {on:8.3f} {off:8.3f}  {off / on:6.2f}x")


if __name__ == "__main__":
    main()
