"""Prefill attention: the native flash kernel (native.prefill_attention: AMX bf16 tiles, or AVX512-BF16
without them, csrc/attention_prefill_avx512.h) against the SDPA path it replaces (attention._prefill_one
in the long-chunk dtype, f32 without AMX), in one process, one call of each in turn. Two parts:

  kernel: one layer's attention of a T-token causal prompt at a model's head shape, ms of the calling
          thread's CPU time (`time.thread_time`), median of the repeats; the kernel plain and with split
          scores (precise: the k-bias layers of Qwen2, attention.PRECISE_SCORES).
  prefill: whole prompts of fresh random ids through a catalog model (`generate(max_tokens=1)`, prefix
          caching off), with the kernel and with it declined (native.prefill_attention -> False, so
          SDPA takes the chunk as on a CPU without it), alternating; tok/s of thread CPU time (the
          thread that runs the model: one thread).

Run with one thread (OMP_NUM_THREADS=1): on a shared machine CPU time is the load-proof figure; read
the ratios. Usage (from the checkout's root, hearth's venv; PYTHONPATH=. so this checkout's hearth runs):

    OMP_NUM_THREADS=1 python benchmarks/bench_prefill_attention.py kernel --tokens 512 2048
    OMP_NUM_THREADS=1 python benchmarks/bench_prefill_attention.py prefill smollm2-135m --tokens 512 2048
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

from hearth.kernels import attention, native
from hearth.kernels.attention import AttentionMetadata

SHAPES = {"smollm2-135m": (9, 3, 64), "qwen2.5-coder-1.5b": (12, 2, 128)}  # heads, kv heads, head_dim


def kernel(tokens: list[int], repeats: int) -> None:
    print(f"flash kernel vs SDPA, one layer, ms of thread CPU time (median of {repeats}); "
          f"flash_prefill: {native.flash_prefill()}")
    for name, (heads, kvh, d) in SHAPES.items():
        for T in tokens:
            g = torch.Generator().manual_seed(T)
            bs = 16
            nb = T // bs + 1
            perm = torch.randperm(nb, generator=g).tolist()
            slots = torch.tensor([perm[p // bs] * bs + p % bs for p in range(T)])
            meta = AttentionMetadata([0, T], [T], [perm], slots, bs)
            cache = torch.randn(2, nb, bs, kvh, d, generator=g).to(torch.float16)
            q = torch.randn(T, heads, d, generator=g)
            out = torch.empty_like(q)
            scale, dtype = d ** -0.5, attention._long_chunk_dtype(False)
            table = meta.table_tensor(0)
            fns = {"flash": lambda: native.prefill_attention(q, cache, table, T, scale, 0, 0.0, out),
                   "split": lambda: native.prefill_attention(q, cache, table, T, scale, 0, 0.0, out, True),
                   "sdpa": lambda: attention._prefill_one(q.to(dtype), cache, meta, 0, scale, 0, 0.0)}
            ts = {k: [] for k in fns}
            for f in fns.values():
                f()
            for _ in range(repeats):
                for k, f in fns.items():
                    t0 = time.thread_time()
                    f()
                    ts[k].append(time.thread_time() - t0)
            want = attention._prefill_one(q, cache, meta, 0, scale, 0, 0.0)
            err = {}
            for k in ("flash", "split"):  # each kernel's own output (both write `out`)
                fns[k]()
                err[k] = (out - want).abs().max().item()
            flops = 4 * heads * d * T * (T + 1) / 2  # the causal half: QK^T and PV
            a, c, b = (statistics.median(ts[k]) for k in ("flash", "split", "sdpa"))
            print(f"{name:20s} ({heads}/{kvh}, d {d}) T {T:5d}: flash {a * 1e3:8.2f} ms ({flops / a / 1e9:6.1f} GFLOP/s), "
                  f"split scores {c * 1e3:8.2f} ms ({flops / c / 1e9:6.1f}), sdpa {b * 1e3:8.2f} ms ({flops / b / 1e9:6.1f}); "
                  f"sdpa / flash {b / a:5.2f}x, sdpa / split {b / c:5.2f}x, max |diff| {err['flash']:.1e} / {err['split']:.1e}")


def prefill(model: str, tokens: list[int], rounds: int) -> None:
    from hearth import LLM, SamplingParams
    llm = LLM(model, threads=1, progress=False, enable_prefix_caching=False, max_model_len=max(tokens) + 16,
              max_num_batched_tokens=max(tokens))
    real = native.prefill_attention
    rng = random.Random(0)
    print(f"{model}: whole prefills, tok/s of thread CPU time (median of {rounds}), flash_prefill: {native.flash_prefill()}")
    for T in tokens:
        ts = {"flash": [], "sdpa": []}
        for r in range(rounds + 1):
            ids = [rng.randrange(1000, 30000) for _ in range(T)]
            for mode in (("flash", "sdpa") if r % 2 == 0 else ("sdpa", "flash")):
                native.prefill_attention = real if mode == "flash" else (lambda *a: False)
                t0 = time.thread_time()
                llm.generate([{"prompt_token_ids": ids}], SamplingParams(temperature=0, max_tokens=1, ignore_eos=True))
                if r:
                    ts[mode].append(time.thread_time() - t0)
        native.prefill_attention = real
        a, b = (statistics.median(ts[k]) for k in ("flash", "sdpa"))
        print(f"  T {T:5d}: flash {T / a:8.1f} tok/s, sdpa {T / b:8.1f} tok/s, flash / sdpa {b / a:5.3f}x "
              f"(pairs: {', '.join(f'{y / x:.3f}' for x, y in zip(ts['flash'], ts['sdpa']))})")
    llm.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("part", choices=("kernel", "prefill"))
    ap.add_argument("model", nargs="?", default="smollm2-135m")
    ap.add_argument("--tokens", type=int, nargs="+", default=[512, 2048])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.part == "kernel":
        kernel(args.tokens, args.repeats)
    else:
        prefill(args.model, args.tokens, args.repeats)


if __name__ == "__main__":
    main()
