"""Prefill matmuls per layer shape: hearth's native prefill GEMM (AMX bf16 tiles; without AMX the int8
VNNI GEMM of csrc/gemm_vnni.h, so the first two columns are one path there), its int8 GEMM (AMX int8
tiles on the amx tier), torch's bf16 matmul on W expanded once, and the torch fallback the avx512 tier used
before (bf16 tiles of W expanded per call, then torch.mm), in one process on a real model's layer-0
weights (their own GGUF types). On the avx2 tier (HEARTH_CPU_TIER=avx2, or an AVX2-only CPU): its
register-blocked int8 GEMM (csrc/gemm_avx2.h), its GEMV (rows_dot, 4 rows a weight row decode),
torch's f32 matmul on W expanded once, and the path that tier took before (W expanded to f32 per
call, then torch.mm). The paths are interleaved (one call of each in turn: a shared machine's load
hits them alike). GOP/s = 2 M N K / wall time, median (and best) of repeats. Usage (from the
checkout's root, hearth's venv; PYTHONPATH=. so this checkout's hearth runs):

    python benchmarks/bench_prefill_gemm.py qwen2.5-coder-1.5b [--rows 512] [--threads 1 2] [--repeats 7]
    python benchmarks/bench_prefill_gemm.py smollm2-135m --rows 16 32 64 128
    HEARTH_CPU_TIER=avx2 python benchmarks/bench_prefill_gemm.py qwen2.5-coder-1.5b --rows 64 512 --threads 2
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


def timed(fns, repeats: int, clock=time.perf_counter) -> list[tuple[float, float]]:
    """(median, best) seconds of each of fns, called in turn `repeats` times (interleaved)."""
    for fn in fns:
        fn()  # warm: buffers grown, pages touched
    ts = [[] for _ in fns]
    for _ in range(repeats):
        for fn, t in zip(fns, ts):
            t0 = clock()
            fn()
            t.append(clock() - t0)
    return [(statistics.median(t), min(t)) for t in ts]


def expanded(raws, k: int, dtype: torch.dtype) -> torch.Tensor:
    """The fused weights as one dense [N, K] tensor."""
    if dtype == torch.bfloat16:
        return torch.cat([native.dequant_bf16(r, q, k, slice(0, r.shape[0])) for r, q in raws])
    return torch.cat([native.dequant_rows(r, q, k, torch.arange(r.shape[0])) for r, q in raws])


def paths(raws, k: int, x: torch.Tensor) -> tuple[str, list]:
    """(the columns' names, the calls to time) of this tier's prefill matmul paths over weights `raws`."""
    if native.has("many_rows"):  # the avx2 tier
        mm, gemv, wf = native.NativeMatmul(raws, k, 64), native.NativeMatmul(raws, k, 0), expanded(raws, k, torch.float32)
        return ("int8 GEMM, GEMV, torch f32 mm, old path (expand f32 + mm)",
                [lambda: mm(x), lambda: gemv(x),
                 lambda: x @ wf.T, lambda: x @ expanded(raws, k, torch.float32).T])
    gemm, int8 = native.NativeMatmul(raws, k, 64), native.NativeMatmul(raws, k, 0)  # 0: int8 from 10 rows
    xb, wb = x.bfloat16(), expanded(raws, k, torch.bfloat16)
    return ("native GEMM, int8 GEMM, torch bf16 mm, old path (expand + mm)",
            [lambda: gemm(x), lambda: int8(x), lambda: xb @ wb.T, lambda: xb @ expanded(raws, k, torch.bfloat16).T])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--rows", type=int, nargs="+", default=[512])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    g = GGUFFile(resolve_model(a.model))
    print(f"{a.model}: AMX bf16 tiles {native.bf16_tiles()}, "
          f"int8 GEMM from {native.batch_min_rows() if native.vnni_gemm() else 0} rows, avx2 int8 GEMM "
          f"{native.has('many_rows')}")
    print(f"{'shape':>8} {'types':>14} {'K':>5} {'N':>6} {'M':>4} thr time | GOP/s median (best) of each path")
    for label, names in LAYER.items():
        ts = [g.tensor(f"blk.0.{n}.weight") for n in names]
        raws = [(as_bytes(t.data, t.qtype), int(t.qtype)) for t in ts]
        k, n = ts[0].shape[1], sum(t.shape[0] for t in ts)
        types = "|".join(sorted({t.qtype.name for t in ts}))
        for m in a.rows:
            columns, fns = paths(raws, k, torch.randn(m, k))
            for threads in a.threads:
                torch.set_num_threads(threads)
                gop = 2 * m * n * k / 1e9
                # one thread: the calling thread's CPU time too (what a busy, shared machine leaves it)
                clocks = [time.perf_counter] + ([time.thread_time] if threads == 1 else [])
                for clock in clocks:
                    cells = " ".join(f"{gop / med:7.1f} ({gop / best:6.1f})" for med, best in timed(fns, a.repeats, clock))
                    kind = "wall" if clock is time.perf_counter else "cpu"
                    print(f"{label:>8} {types:>14} {k:5d} {n:6d} {m:4d} {threads:3d} {kind:>4} | {cells}  [{columns}]",
                          flush=True)


if __name__ == "__main__":
    main()
