"""Measure this machine in a fresh process: `python -m hearth.memory.bandwidth` prints one JSON
object. The only torch user of hearth.memory; hearth.memory.this_machine runs it and caches it.

  runtime_bytes  resident memory of a fresh python once the libraries hearth's engine runs on are
                 imported and a few small ops have run (their code pages fault in on first use):
                 the fixed cost every hearth process pays before any model byte
  bandwidth      reading a buffer larger than any cache once, in order (as decode reads weights),
                 best of 3: bytes / seconds of torch's sum over it and, where the native kernels
                 load, of their read pass in 1-16 interleaved runs (csrc/peaks.h), the best of all
  peak_flops     a bf16 matmul, best of 3: 2 n^3 / seconds
  int8_ops       where a native tier without AMX loads (whose GEMMs run quantized weights' prefills
                 on int8 dots), its dot pass (csrc/peaks.h), best of 3: 2 x multiply-adds / seconds;
                 else 0 (AMX prefills run on bf16 tiles, which the matmul measures)
  tier           the kernel tier measured (`hearth.kernels.tiers`)
On a CUDA machine a copy, (bytes read + written) / seconds, and the matmul run on the GPU, memory is
the GPU's, and runtime_bytes is what the CUDA context takes (total - free after start-up)."""

from __future__ import annotations

import importlib
import json
import os
import sys
import time

COPY_BYTES = 512 * 2**20  # per buffer; two of them, so 1 GiB in all, well past a 300 MB L3
READ_BYTES = 2 * COPY_BYTES
REPEATS = 3
METHOD = 3
"""What `measure` measures, in the cache's key: from 2 (2026-12-06) CPUs read where they copied, 3
adds int8_ops."""
STREAMS = (1, 2, 4, 8, 16)
"""Interleaved runs of the kernels' read pass tried: the best pattern differs per CPU (rows_dot.h)."""
DOT_ROUNDS = 1 << 20
RUNTIME_MODULES = ("torch", "numpy", "gguf", "tokenizers", "jinja2", "tqdm")


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _best_seconds(fn, sync) -> float:
    fn()  # warm-up: first touch of the pages, kernel selection
    sync()
    best = float("inf")
    for _ in range(REPEATS):
        t = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t)
    return best


def copy_bandwidth(torch, device: str, nbytes: int) -> float:
    src = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    seconds = _best_seconds(lambda: dst.copy_(src), _sync(torch, device))
    return 2 * nbytes / seconds  # each byte is read once and written once


def read_bandwidth(torch, nbytes: int, lib) -> float:
    buf = torch.ones(nbytes // 4, dtype=torch.float32)
    rates = [nbytes / _best_seconds(lambda: buf.sum(), _no_sync)]
    if lib is not None:
        rates += [nbytes / _best_seconds(lambda: lib.hk_read_pass(buf.data_ptr(), nbytes, s), _no_sync) for s in STREAMS]
    return max(rates)


def int8_dot_ops(lib) -> float:
    macs = lib.hk_int8_dot_pass(DOT_ROUNDS)  # every thread's, counted from their accumulators
    return 2 * macs / _best_seconds(lambda: lib.hk_int8_dot_pass(DOT_ROUNDS), _no_sync)


def matmul_flops(torch, device: str, n: int) -> float:
    a = torch.randn(n, n, device=device).to(torch.bfloat16)
    b = torch.randn(n, n, device=device).to(torch.bfloat16)
    return 2 * n**3 / _best_seconds(lambda: a @ b, _sync(torch, device))


def _no_sync() -> None:
    pass


def _sync(torch, device: str):
    return torch.cuda.synchronize if device == "cuda" else _no_sync


def native_peaks():
    """The native kernel library with its roofline passes, or None (the torch tier)."""
    from hearth.kernels import native

    return native.lib() if native.has("peaks") else None


def kernel_tier() -> str:
    from hearth.kernels import tiers

    return tiers.active()


def import_runtime() -> None:
    """What an engine process holds before its model: the libraries hearth's engine runs on."""
    for name in RUNTIME_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def warm_up(torch) -> None:
    """One of each kind of op a decoder step runs, small: matmuls (f32, bf16), softmax, attention."""
    x = torch.randn(64, 64)
    for t in (x, x.to(torch.bfloat16)):
        t @ t
        torch.softmax(t, -1)
        torch.nn.functional.silu(t)
        torch.nn.functional.scaled_dot_product_attention(t[None, None], t[None, None], t[None, None])


def measure() -> dict:
    import_runtime()
    import torch

    if torch.cuda.is_available():
        return _measure_cuda(torch)
    warm_up(torch)
    runtime = rss_bytes()
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    lib, tier = native_peaks(), kernel_tier()
    return {"kind": "cpu", "runtime_bytes": runtime, "threads": torch.get_num_threads(), "tier": tier,
            "bandwidth": read_bandwidth(torch, min(READ_BYTES, mem // 16), lib),
            "peak_flops": matmul_flops(torch, "cpu", 2048),
            "int8_ops": int8_dot_ops(lib) if lib is not None and tier != "amx" else 0.0}


def _measure_cuda(torch) -> dict:
    torch.cuda.init()
    free, total = torch.cuda.mem_get_info()
    return {"kind": "cuda", "name": torch.cuda.get_device_name(), "memory_bytes": total,
            "runtime_bytes": total - free,
            "bandwidth": copy_bandwidth(torch, "cuda", 4 * COPY_BYTES),
            "peak_flops": matmul_flops(torch, "cuda", 8192)}


if __name__ == "__main__":
    json.dump(measure(), sys.stdout)
