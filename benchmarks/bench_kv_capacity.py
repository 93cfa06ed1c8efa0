"""Aggregate throughput when KV memory is the limit (issue 6): the same KV budget for every format,
more requests than an f16 cache can hold at once, and how many output tokens per second each format
gets through.

Every format gets `--kv-gb` of KV memory (its staging included, as `hearth serve --kv-cache-memory-gb`
counts it) and the same `--requests` distinct prompts of `--prompt` tokens of the shipped text, each
generating `--new` greedy tokens (EOS ignored), with `--max-num-seqs` slots and prefix caching off.
The scheduler admits what fits and preempts (recomputes) the newest request when blocks run out, so a
format that holds more tokens decodes more sequences per step and wastes less on recompute. Each
format's LLM is loaded once; rounds interleave the formats (a shared machine drifts); medians.

    .venv/bin/python benchmarks/bench_kv_capacity.py [--model smollm2-135m] [--kv-gb 0.14]
        [--requests 16] [--prompt 1024] [--new 512] [--formats f16,q8_0,...] [--rounds 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

from hearth import LLM, SamplingParams
from hearth.commands.eval import DEFAULT_TEXT

FORMATS = ["f16", "q8_0", "kvarn_k4v4", "kvarn_k4v2"]


def prompts(llm: LLM, n: int, length: int) -> list[list[int]]:
    """n distinct prompts: consecutive stretches of the shipped text, each behind its own number."""
    text = llm.tokenizer.encode(DEFAULT_TEXT.read_text(), parse_special=False)
    step = max(1, (len(text) - length) // n)
    out = []
    for i in range(n):
        head = llm.tokenizer.encode(f"Passage {i}:\n", add_special_tokens=False)
        out.append((head + text[i * step:i * step + length])[:length])
    return out


def run(llm: LLM, batch: list[list[int]], new: int) -> dict:
    """All requests at once; the engine stepped by hand, counting sequences per step."""
    engine, sched = llm.engine, llm.engine.scheduler
    params = SamplingParams(temperature=0, max_tokens=new, ignore_eos=True)
    preempted = sched.num_preemptions
    t0 = time.perf_counter()
    for i, ids in enumerate(batch):
        engine.add_request(ids, params, request_id=f"cap{t0}-{i}")
    tokens, running = 0, []
    while engine.has_unfinished():
        tokens += sum(len(out.new_token_ids) for out in engine.step())
        running.append(len(sched.running))
    wall = time.perf_counter() - t0
    assert tokens == new * len(batch), f"{tokens} tokens"
    return {"wall": wall, "tok_s": tokens / wall, "max_running": max(running),
            "mean_running": statistics.mean(running), "preemptions": sched.num_preemptions - preempted}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--kv-gb", type=float, default=0.14, help="KV memory per format, GiB")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--new", type=int, default=512)
    ap.add_argument("--max-num-seqs", type=int, default=16)
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    names = args.formats.split(",")
    llms = {name: LLM(args.model, kv_cache_dtype=name, kv_cache_memory_gb=args.kv_gb, threads=args.threads,
                      max_num_seqs=args.max_num_seqs, max_model_len=args.prompt + args.new,
                      enable_prefix_caching=False, progress=False) for name in names}
    batch = prompts(llms[names[0]], args.requests, args.prompt)
    seq_tokens = args.prompt + args.new  # a sequence's length when it finishes
    print(f"{args.model}, {args.threads} threads, {args.kv_gb} GiB of KV per format; {args.requests} requests of "
          f"{args.prompt} prompt + {args.new} new tokens, up to {args.max_num_seqs} at once; medians of "
          f"{args.rounds} interleaved rounds")
    results = {name: [] for name in names}
    for r in range(args.rounds):
        for name in names:
            results[name].append(run(llms[name], batch, args.new))
            print(f"  round {r + 1} {name}: {results[name][-1]['tok_s']:.1f} tok/s", flush=True)
    print(f"{'format':12} {'pool tokens':>11} {'seqs fit':>9} {'max running':>12} {'mean running':>13} "
          f"{'preempted':>10} {'wall s':>7} {'tok/s':>7} {'vs f16':>7}")
    base = None
    for name in names:
        llm, rs = llms[name], results[name]
        kv, bs = llm.engine.scheduler.kv, llm.config.block_size
        # whole sequences the pool holds (their staging is beside it, within the same --kv-gb)
        fit = kv.pool.num_blocks / -(-seq_tokens // bs)
        med = {k: statistics.median(x[k] for x in rs) for k in rs[0]}
        base = base or med["tok_s"]
        print(f"{name:12} {kv.pool.num_blocks * bs:11,} {fit:9.1f} {med['max_running']:12.0f} "
              f"{med['mean_running']:13.1f} {med['preemptions']:10.0f} {med['wall']:7.1f} {med['tok_s']:7.1f} "
              f"{med['tok_s'] / base:6.2f}x")


if __name__ == "__main__":
    main()
