"""Two builds of the selected tier's kernel library in one process: this checkout's and another
checkout's (the reference, e.g. main's worktree), on real models' layer matrices (their own GGUF
types, fused as the models build them). `check`: every output of every layer's matrices equal bit for
bit at the given row counts. `time`: layer-0 matrices, one call of each library in turn (interleaved),
GOP/s of the calling thread's CPU time (`time.thread_time`: what a shared machine leaves it), median
of repeats, and the median of the per-pair ratios. Run from the checkout's root with one thread:

    HEARTH_CPU_TIER=avx512 OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/ab_native_gemm.py check REF \
        qwen2.5-coder-1.5b qwen2.5-coder-0.5b smollm2-135m --rows 64 256 512
    HEARTH_CPU_TIER=avx512 OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/ab_native_gemm.py time REF \
        qwen2.5-coder-1.5b --rows 64 256 512 --repeats 9

The GEMV (decode and verify steps' row counts): --rows 1 2 5 8 --head adds the output head (its own
type: Q6_K on the 1.5B, Q8_0 on the 0.5B and SmolLM2); `time` also prints the weights' GB/s.
--exact sums every row as a verify step does (native.batch_invariant on both libraries: past 9 rows
the GEMV, not the batch GEMMs, where the CPU has no AMX). --gemm-min-rows N gives the plans a gemm_min_rows (a prefill's: the avx2 tier's csrc/gemm_avx2.h runs
from N rows on; 0, the default, keeps that tier on its GEMV):

    HEARTH_CPU_TIER=avx2 OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/ab_native_gemm.py time REF \
        qwen2.5-coder-1.5b --rows 512 --gemm-min-rows 64
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from hearth.kernels import native, tiers
from hearth.layers.quant import as_bytes
from hearth.loader.gguf_loader import GGUFFile
from hearth.loader.resolve import resolve_model

LAYER = {  # name: tensors fused side by side (as the models build them)
    "q|k|v": ("attn_q", "attn_k", "attn_v"), "o": ("attn_output",), "gate|up": ("ffn_gate", "ffn_up"),
    "down": ("ffn_down",)}


def reference_library(checkout: Path):
    """The selected tier's library built from `checkout`'s csrc, loaded beside this checkout's."""
    tier = tiers.selected()
    library, here = native.LIBRARIES[tier.name], native.CSRC
    native.CSRC = checkout / "hearth" / "kernels" / "csrc"
    try:
        path = native._build(library)
    finally:
        native.CSRC = here
    if path == native._build(library):
        print("note: the reference's sources are this checkout's (the A/B measures noise)")
    return native._load(tier, library, path)


def matrices(model: str, layers: bool, head: bool = False):
    """(layer, label, raws, k, n) of every layer's fused matrices (or layer 0's only), and the output
    head's (output.weight, or the tied token_embd.weight) when `head`."""
    g = GGUFFile(resolve_model(model))
    count = int(g.arch_get("block_count")) if layers else 1
    for b in range(count):
        for label, names in LAYER.items():
            ts = [g.tensor(f"blk.{b}.{n}.weight") for n in names]
            yield b, label, [(as_bytes(t.data, t.qtype), int(t.qtype)) for t in ts], ts[0].shape[1], \
                sum(t.shape[0] for t in ts)
    if head:
        t = g.tensor("output.weight" if "output.weight" in g.tensors else "token_embd.weight")
        yield count, "head", [(as_bytes(t.data, t.qtype), int(t.qtype))], t.shape[1], t.shape[0]


def invariant_rows(libraries, n: int) -> None:
    """native.batch_invariant's setting on each library that has batch GEMMs (the others run the GEMV
    at every row count already)."""
    for so in libraries:
        if hasattr(so, "hk_set_invariant_rows"):
            so.hk_set_invariant_rows(n)


def check(ref, models, rows, head: bool = False, gemm_min_rows: int = 0, exact: bool = False) -> int:
    bad = 0
    invariant_rows((native.lib(), ref), max(rows) if exact else 0)
    for model in models:
        xs = {}
        for b, label, raws, k, n in matrices(model, True, head):
            mine, theirs = native.NativeMatmul(raws, k, gemm_min_rows), native.NativeMatmul(raws, k, gemm_min_rows, ref)
            for m in rows:
                x = xs.setdefault((k, m), torch.randn(m, k, generator=torch.Generator().manual_seed(m + k)) * 2)
                a, r = mine(x), theirs(x)
                if not torch.equal(a.view(torch.int32), r.view(torch.int32)):
                    bad += 1
                    diff = (a != r).sum().item()
                    print(f"{model} blk.{b} {label} M={m}: {diff} of {a.numel()} outputs differ", flush=True)
        print(f"{model}: checked, {bad} matrices differ so far", flush=True)
    return bad


def timing(ref, models, rows, repeats: int, head: bool = False, gemm_min_rows: int = 0, exact: bool = False) -> None:
    print(f"{'model':>20} {'shape':>8} {'K':>5} {'N':>6} {'M':>4} | GOP/s (CPU) ref  this  | this/ref time "
          f"| weights GB/s ref  this")
    for model in models:
        for _, label, raws, k, n in matrices(model, False, head):
            size = sum(r.numel() for r, _ in raws) / 1e9
            mine, theirs = native.NativeMatmul(raws, k, gemm_min_rows), native.NativeMatmul(raws, k, gemm_min_rows, ref)
            for m in rows:
                invariant_rows((native.lib(), ref), m if exact else 0)
                x, y = torch.randn(m, k), torch.empty(m, n)  # y reused, as the layers' scratch (no page faults)
                fns = [lambda: theirs(x, out=y), lambda: mine(x, out=y)]
                for fn in fns:
                    fn()
                ts = [[], []]
                for _ in range(repeats):
                    for fn, t in zip(fns, ts):
                        t0 = time.thread_time()
                        fn()
                        t.append(time.thread_time() - t0)
                gop = 2 * m * n * k / 1e9
                ratio = statistics.median(b / a for a, b in zip(*ts))
                print(f"{model:>20} {label:>8} {k:5d} {n:6d} {m:4d} | {gop / statistics.median(ts[0]):7.1f} "
                      f"{gop / statistics.median(ts[1]):7.1f} | {ratio:.3f}         | "
                      f"{size / statistics.median(ts[0]):6.1f} {size / statistics.median(ts[1]):6.1f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["check", "time"])
    ap.add_argument("reference", type=Path, help="the other checkout's root")
    ap.add_argument("models", nargs="+")
    ap.add_argument("--rows", type=int, nargs="+", default=[64, 256, 512])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--head", action="store_true", help="the output head too")
    ap.add_argument("--exact", action="store_true", help="every row summed as a verify step's (batch_invariant)")
    ap.add_argument("--gemm-min-rows", type=int, default=0, help="the plans' gemm_min_rows (0: never)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    ref = reference_library(a.reference)
    if a.what == "check":
        raise SystemExit(1 if check(ref, a.models, a.rows, a.head, a.gemm_min_rows, a.exact) else 0)
    timing(ref, a.models, a.rows, a.repeats, a.head, a.gemm_min_rows, a.exact)


if __name__ == "__main__":
    main()
