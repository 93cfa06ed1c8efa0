"""Prefill matmuls per layer shape: hearth's native prefill GEMM against torch's bf16 matmul and the
torch fallback it replaced (bf16 tiles of W expanded per call, then torch.mm), back to back in one
process on a real model's layer-0 weights (their own GGUF types). GOP/s = 2 M N K / time, median
(and best) of repeats. Usage (from the checkout's root, hearth's venv):

    python benchmarks/bench_prefill_gemm.py qwen2.5-coder-1.5b [--rows 512] [--threads 1 2] [--repeats 7]
    python benchmarks/bench_prefill_gemm.py smollm2-135m --rows 16 32 64 128   # the GEMV / GEMM crossover
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from hearth.kernels import native
from hearth.layers.quant import as_bytes
from hearth.loader.gguf_loader import GGUFFile
from hearth.loader.resolve import resolve_model

LAYER = {  # name: tensors fused side by side (as the models build them)
    "q|k|v": ("attn_q", "attn_k", "attn_v"), "o": ("attn_output",), "gate|up": ("ffn_gate", "ffn_up"),
    "down": ("ffn_down",)}


def timed(fn, repeats: int) -> tuple[float, float]:
    fn()  # warm: buffers grown, pages touched
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), min(ts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--rows", type=int, nargs="+", default=[512])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    g = GGUFFile(resolve_model(a.model))
    print(f"{a.model}: native tier with bf16 tiles: {native.bf16_tiles()}")
    print(f"{'shape':>8} {'types':>14} {'K':>5} {'N':>6} {'M':>4} thr | GOP/s median (best): native GEMM, "
          f"native GEMV, torch bf16 mm, old path (expand + mm)")
    for label, names in LAYER.items():
        ts = [g.tensor(f"blk.0.{n}.weight") for n in names]
        raws = [(as_bytes(t.data, t.qtype), int(t.qtype)) for t in ts]
        k, n = ts[0].shape[1], sum(t.shape[0] for t in ts)
        gemm = native.NativeMatmul(raws, k, 64)
        gemv = native.NativeMatmul(raws, k, 0)
        wb = torch.cat([native.dequant_bf16(r, q, k, slice(0, r.shape[0])) for r, q in raws])

        def old(xb):
            w = torch.cat([native.dequant_bf16(r, q, k, slice(0, r.shape[0])) for r, q in raws])
            return xb @ w.T

        types = "|".join(sorted({t.qtype.name for t in ts}))
        for m in a.rows:
            x = torch.randn(m, k)
            xb = x.bfloat16()
            for threads in a.threads:
                torch.set_num_threads(threads)
                gop = 2 * m * n * k / 1e9
                res = [timed(f, a.repeats) for f in (lambda: gemm(x), lambda: gemv(x), lambda: xb @ wb.T,
                                                      lambda: old(xb))]
                cells = " ".join(f"{gop / med:7.1f} ({gop / best:6.1f})" for med, best in res)
                print(f"{label:>8} {types:>14} {k:5d} {n:6d} {m:4d} {threads:3d} | {cells}", flush=True)


if __name__ == "__main__":
    main()
