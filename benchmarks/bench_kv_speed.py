"""Decode speed per KV format at long context (issue 6): tokens/s of one sequence decoding with
ctx tokens already in the cache, each format vs f16 (target: KVarN >= 0.9x of f16 at equal batch).

Each format's cache is filled with random K/V (the speed of a decode step depends on how many blocks
it reads and decodes, not on their values); then rounds of `--steps` decode steps run through the
runner, the formats interleaved round by round (a shared machine drifts), each round replaying the
same positions. Reported per format, from its best round: tokens/s of the median step (a step that
only stages its token), tokens/s over the whole round (with the steps that fill a block and encode
it: 128 steps from a multiple of 128 seal exactly one KVarN block and eight 16-token blocks), the
KV bytes one step reads (sliding-window layers read only their window) and the rate it reads them.

    .venv/bin/python benchmarks/bench_kv_speed.py [--model gemma3-270m] [--ctx 4096,16384] [--steps 128]
        [--rounds 2] [--formats f16,q8_0,...] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from hearth import LLM
from hearth.commands.eval import runner_for
from hearth.kernels import native
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
                cache.write(kv, plan, native if native.available() else None)  # as write_kv_pair does
            else:
                flat = cache.view(2, -1, cfg.num_kv_heads, cfg.head_dim)
                flat[:, p:p + n] = kv.transpose(0, 1).to(flat.dtype)  # blocks are 0..nb-1: slots are positions


def kv_bytes_read(cfg, runner, ctx: int) -> int:
    """Bytes of K/V one decode step at ctx reads, over every layer (a sliding layer reads its window)."""
    per_token = runner.codec.block_bytes(runner.block_size, cfg.num_kv_heads, cfg.head_dim) / runner.block_size
    sliding = cfg.sliding_window_pattern or (False,) * cfg.num_layers
    return int(sum(min(ctx, cfg.sliding_window) if s and cfg.sliding_window else ctx for s in sliding) * per_token)


class Decoder:
    """One format's runner with ctx tokens cached; a round is `steps` greedy decode steps from ctx."""

    def __init__(self, llm, name: str, ctx: int, steps: int):
        self.runner = runner_for(llm, name, ctx + steps + 1)
        self.blocks = list(range(-(-(ctx + steps + 1) // self.runner.block_size)))
        self.ctx, self.steps, self.rounds = ctx, steps, []
        fill(self.runner, "bench", ctx, self.blocks)
        self.round()  # warm-up
        self.rounds.clear()

    def round(self) -> None:
        params, times, token = SamplingParams(temperature=0), [], 100
        for i in range(self.steps):
            seq = ScheduledSequence("bench", [token], self.ctx + i, self.blocks, True, params, [])
            t0 = time.perf_counter()
            token = self.runner.execute(SchedulerOutput([seq])).sampled["bench"].token_id
            times.append(time.perf_counter() - t0)
        self.rounds.append(times)

    def rates(self) -> tuple[float, float]:
        """(tokens/s of the median step, tokens/s over a round), each from its best round."""
        return 1.0 / min(map(statistics.median, self.rounds)), len(self.rounds[0]) / min(map(sum, self.rounds))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gemma3-270m")
    ap.add_argument("--ctx", default="4096,16384")
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    ctxs, names = [int(c) for c in args.ctx.split(",")], args.formats.split(",")
    llm = LLM(args.model, progress=False, max_model_len=max(ctxs) + args.steps + 8, num_kv_blocks=1,
              max_num_seqs=1, threads=args.threads)
    cfg = llm.model_config
    print(f"{args.model}, {torch.get_num_threads()} threads, best of {args.rounds} interleaved rounds of "
          f"{args.steps} decode steps")
    ref = "vs " + names[0]
    print(f"{'ctx':>6} {'format':12} {'median tok/s':>12} {ref:>7} {'with seals':>10} {ref:>7} {'KV MB/step':>11} "
          f"{'KV GB/s':>8}")
    for ctx in ctxs:
        decoders = {name: Decoder(llm, name, ctx, args.steps) for name in names}
        for _ in range(args.rounds):
            for d in decoders.values():
                d.round()
        base = None
        for name, d in decoders.items():
            tps, whole = d.rates()
            base = base or (tps, whole)
            mb = kv_bytes_read(cfg, d.runner, ctx) / 1e6
            print(f"{ctx:6} {name:12} {tps:12.2f} {tps / base[0]:7.2f} {whole:10.2f} {whole / base[1]:7.2f} "
                  f"{mb:11.1f} {mb * tps / 1e3:8.2f}", flush=True)
        del decoders


if __name__ == "__main__":
    main()
