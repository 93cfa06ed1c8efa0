"""Decode speed per KV format at long context (issue 6): tokens/s of one sequence decoding with
ctx tokens already in the cache, each format vs f16 (target: KVarN >= 0.9x of f16 at equal batch).

The cache is filled with random K/V (the speed of a decode step depends on how many blocks it reads
and decodes, not on their values), then `--steps` greedy decode steps run through the runner; the
median step time is reported with the KV bytes the step reads.

    .venv/bin/python benchmarks/bench_kv_speed.py [--model gemma3-270m] [--ctx 4096,16384] [--steps 16]
        [--formats f16,q8_0,...] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from hearth import LLM
from hearth.commands.eval import runner_for
from hearth.kvstore.paged import QuantizedKVCache
from hearth.runner.messages import ScheduledSequence, SchedulerOutput
from hearth.sampling_params import SamplingParams

FORMATS = ["f16", "fp8_e4m3", "q8_0", "q4_0", "kvarn_k4v4", "kvarn_k4v2"]
FILL_CHUNK = 2048


def fill(runner, rid: str, ctx: int, blocks: list[int]) -> None:
    """Random K/V at positions [0, ctx) of every layer, written the way the model writes them."""
    cfg, g = runner.cfg, torch.Generator().manual_seed(0)
    for p in range(0, ctx, FILL_CHUNK):
        n = min(FILL_CHUNK, ctx - p)
        plan = runner.staging.plan([(rid, p, n, blocks)], [0, n]) if runner.staging is not None else None
        for cache in runner.kv_caches:
            kv = torch.randn(n, 2, cfg.num_kv_heads, cfg.head_dim, generator=g)
            if isinstance(cache, QuantizedKVCache):
                cache.write(kv, plan)
            else:
                flat = cache.view(2, -1, cfg.num_kv_heads, cfg.head_dim)
                flat[:, p:p + n] = kv.transpose(0, 1).to(flat.dtype)  # blocks are 0..nb-1: slots are positions


def decode_speed(llm, name: str, ctx: int, steps: int) -> tuple[float, int]:
    runner = runner_for(llm, name, ctx + steps + 1)
    blocks = list(range(-(-(ctx + steps + 1) // runner.block_size)))
    fill(runner, "bench", ctx, blocks)
    params, times, token = SamplingParams(temperature=0), [], 100
    for i in range(steps + 2):
        seq = ScheduledSequence("bench", [token], ctx + i, blocks, True, params, [])
        t0 = time.perf_counter()
        token = runner.execute(SchedulerOutput([seq])).sampled["bench"].token_id
        if i >= 2:  # two warm-up steps
            times.append(time.perf_counter() - t0)
    cfg = llm.model_config
    kv_read = cfg.num_layers * runner.codec.block_bytes(runner.block_size, cfg.num_kv_heads, cfg.head_dim) \
        * ctx // runner.block_size
    return 1.0 / statistics.median(times), kv_read


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gemma3-270m")
    ap.add_argument("--ctx", default="4096,16384")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    ctxs = [int(c) for c in args.ctx.split(",")]
    llm = LLM(args.model, progress=False, max_model_len=max(ctxs) + args.steps + 8, num_kv_blocks=1,
              max_num_seqs=1, threads=args.threads)
    print(f"{args.model}, {torch.get_num_threads()} threads, median of {args.steps} decode steps")
    print(f"{'ctx':>6} {'format':12} {'tok/s':>7} {'vs f16':>7} {'KV MB read':>11}")
    for ctx in ctxs:
        base = None
        for name in args.formats.split(","):
            tps, kv_read = decode_speed(llm, name, ctx, args.steps)
            base = base or tps
            print(f"{ctx:6} {name:12} {tps:7.2f} {tps / base:7.2f} {kv_read / 1e6:11.1f}", flush=True)


if __name__ == "__main__":
    main()
