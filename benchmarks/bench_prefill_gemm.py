"""Prefill matmuls per layer shape: hearth's native prefill GEMM (AMX bf16 tiles, or without AMX the
AVX512-BF16 panels of csrc/gemm_dpbf16.h), its int8 VNNI GEMM (csrc/gemm_vnni.h; AMX int8 tiles on
the amx tier), torch's bf16 matmul on W expanded once, and the torch fallback the avx512 tier used
before (bf16 tiles of W expanded per call, then torch.mm), back to back in one process on a real
model's layer-0 weights (their own GGUF types). GOP/s = 2 M N K / wall time, median (and best) of
repeats. Usage (from the checkout's root, hearth's venv; PYTHONPATH=. so this checkout's hearth runs):

    python benchmarks/bench_prefill_gemm.py qwen2.5-coder-1.5b [--rows 512] [--threads 1 2] [--repeats 7]
    python benchmarks/bench_prefill_gemm.py smollm2-135m --rows 16 32 64 128
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


def timed(fn, repeats: int, clock=time.perf_counter) -> tuple[float, float]:
    fn()  # warm: buffers grown, pages touched
    ts = []
    for _ in range(repeats):
        t0 = clock()
        fn()
        ts.append(clock() - t0)
    return statistics.median(ts), min(ts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--rows", type=int, nargs="+", default=[512])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    g = GGUFFile(resolve_model(a.model))
    print(f"{a.model}: AMX bf16 tiles {native.bf16_tiles()}, AVX512-BF16 GEMM {native.dpbf16_gemm()}, "
          f"int8 GEMM from {native.batch_min_rows() if native.vnni_gemm() else 0} rows")
    print(f"{'shape':>8} {'types':>14} {'K':>5} {'N':>6} {'M':>4} thr time | GOP/s median (best): native GEMM, "
          f"int8 GEMM, torch bf16 mm, old path (expand + mm)")
    for label, names in LAYER.items():
        ts = [g.tensor(f"blk.0.{n}.weight") for n in names]
        raws = [(as_bytes(t.data, t.qtype), int(t.qtype)) for t in ts]
        k, n = ts[0].shape[1], sum(t.shape[0] for t in ts)
        gemm = native.NativeMatmul(raws, k, 64)
        int8 = native.NativeMatmul(raws, k, 0)  # gemm_min_rows 0: no bf16 GEMM, int8 from 10 rows
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
                # one thread: the calling thread's CPU time too (what a busy, shared machine leaves it)
                clocks = [time.perf_counter] + ([time.thread_time] if threads == 1 else [])
                for clock in clocks:
                    res = [timed(f, a.repeats, clock) for f in (lambda: gemm(x), lambda: int8(x), lambda: xb @ wb.T,
                                                                 lambda: old(xb))]
                    cells = " ".join(f"{gop / med:7.1f} ({gop / best:6.1f})" for med, best in res)
                    kind = "wall" if clock is time.perf_counter else "cpu"
                    print(f"{label:>8} {types:>14} {k:5d} {n:6d} {m:4d} {threads:3d} {kind:>4} | {cells}", flush=True)


if __name__ == "__main__":
    main()
