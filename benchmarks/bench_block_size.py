"""How the KV block size changes speed (issue 3: the default is chosen by measurement).

For each block size, in one process per size (so each starts from the same state): prefill tok/s
of a 512-token prompt, decode tok/s of 1 and of 16 sequences (256-token prompts, 64 new tokens,
greedy), prefix-cache hit rate of a second pass over prompts that share their first 200 tokens
(larger blocks reuse less of a shared prefix). Medians of --repeats.

    .venv/bin/python benchmarks/bench_block_size.py [--sizes 8,16,32,64] [--model smollm2-135m]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time


def worker(model: str, block_size: int, repeats: int) -> dict:
    import torch

    from hearth import LLM, SamplingParams

    torch.set_num_threads(2)
    llm = LLM(model, block_size=block_size)
    greedy = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)
    one = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)

    def prompts(n: int, length: int, salt: int) -> list[dict]:
        return [{"prompt_token_ids": [(salt * 7919 + i * 104729 + j * 31) % 40000 + 100 for j in range(length)]}
                for i in range(n)]

    def decode_rate(n: int, salt: int) -> float:
        ps = prompts(n, 256, salt)
        llm.generate(ps, one)  # prefill (then cached): the timed run is decode
        t = time.perf_counter()
        llm.generate(ps, greedy)
        return n * 63 / (time.perf_counter() - t)

    llm.generate(prompts(2, 300, 1), greedy)  # warm-up
    out = {"prefill": [], "decode_1": [], "decode_16": []}
    for r in range(repeats):
        p = prompts(1, 512, 1000 + r)
        t = time.perf_counter()
        llm.generate(p, one)
        out["prefill"].append(512 / (time.perf_counter() - t))
        out["decode_1"].append(decode_rate(1, 2000 + r))
        out["decode_16"].append(decode_rate(16, 3000 + r))
    shared = [{"prompt_token_ids": prompts(1, 200, 9)[0]["prompt_token_ids"] + [500 + i] * 40} for i in range(8)]
    llm.generate(shared[:1], one)
    res = llm.generate(shared[1:], one)
    hit = sum(o.num_cached_tokens for o in res) / (7 * 240)
    return {k: statistics.median(v) for k, v in out.items()} | {"shared_prefix_hit": hit}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="8,16,32,64")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.model, args.worker, args.repeats)))
        return 0
    rows = {}
    for bs in (int(s) for s in args.sizes.split(",")):
        print(f"block size {bs} ...", file=sys.stderr, flush=True)
        r = subprocess.run([sys.executable, __file__, "--worker", str(bs), "--model", args.model,
                            "--repeats", str(args.repeats)], capture_output=True, text=True, check=True)
        rows[bs] = json.loads(r.stdout.strip().splitlines()[-1])
    print(f"\n{args.model}, 2 threads, medians of {args.repeats}")
    print("| block size | prefill tok/s (512) | decode tok/s, 1 seq | decode tok/s, 16 seqs | shared-prefix hit |")
    print("|---|---|---|---|---|")
    for bs, r in rows.items():
        print(f"| {bs} | {r['prefill']:,.0f} | {r['decode_1']:.1f} | {r['decode_16']:.1f} | {r['shared_prefix_hit']:.0%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
