"""KV-cache quantization quality at benchmark scale (issue 6): per KV format, perplexity of the
shipped text at 4K context over >= 16K tokens (llama-perplexity's method, `hearth eval perplexity`)
vs f16, and greedy agreement with f16 over 256 tokens: how many tokens run the same before the first
difference (free-running), and at how many of f16's tokens, fed back one by one, the format's pick is
the same (teacher-forced). Target: KVarN k4v2 within 3% of f16.

    .venv/bin/python benchmarks/bench_kv_quality.py [--model smollm2-135m] [--ctx 4096] [--windows 4]
        [--formats f16,q8_0,...] [--greedy 256] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

from hearth import LLM
from hearth.commands.eval import DEFAULT_TEXT, greedy, perplexity, runner_for

FORMATS = ["f16", "fp8_e4m3", "q8_0", "q4_0", "kvarn_k4v4", "kvarn_k4v2"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--windows", type=int, default=4, help="windows of ctx tokens (4 x 4096 = 16,384 tokens)")
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--greedy", type=int, default=256, help="greedy tokens compared with f16 (0 = skip)")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()

    llm = LLM(args.model, progress=False, max_model_len=args.ctx, num_kv_blocks=1, max_num_seqs=1)
    tokens = llm.tokenizer.encode(DEFAULT_TEXT.read_text(), parse_special=False)
    assert len(tokens) >= args.ctx * args.windows, f"{len(tokens)} tokens < {args.windows} x {args.ctx}"
    prompt = tokens[len(tokens) // 2:len(tokens) // 2 + args.prompt_tokens]
    rows, base_ppl, base_greedy = [], None, None
    print(f"{args.model}: {args.windows} windows x {args.ctx} tokens of {DEFAULT_TEXT.name} "
          f"({args.windows * (args.ctx // 2 - 1)} tokens scored); greedy {args.greedy} tokens after {len(prompt)}")
    print(f"{'format':12} {'PPL':>9} {'+-':>8} {'vs f16':>8} {'greedy=f16':>11} {'fed back':>9} {'KV B/token':>11} {'s':>6}")
    for name in args.formats.split(","):
        t0 = time.perf_counter()
        runner = runner_for(llm, name, args.ctx)
        r = perplexity(runner, llm.tokenizer, tokens, args.ctx, limit=args.windows)
        agree = forced = None
        if args.greedy:
            ctx = len(prompt) + args.greedy
            g = greedy(runner_for(llm, name, ctx), prompt, args.greedy)
            if base_greedy is None:
                base_greedy = g
            agree = next((i for i, (a, b) in enumerate(zip(base_greedy, g)) if a != b), args.greedy)
            picks = greedy(runner_for(llm, name, ctx), prompt, args.greedy, feed=base_greedy)
            forced = sum(a == b for a, b in zip(picks, base_greedy))
        if base_ppl is None:
            base_ppl = r.value
        cfg = llm.model_config
        per_token = runner.codec.block_bytes(runner.block_size, cfg.num_kv_heads, cfg.head_dim) / runner.block_size
        row = {"format": name, "ppl": r.value, "stderr": r.stderr, "vs_f16": r.value / base_ppl - 1,
               "greedy_agree": agree, "greedy_forced": forced, "kv_bytes_per_token_layer": per_token, "seconds": time.perf_counter() - t0}
        rows.append(row)
        print(f"{name:12} {r.value:9.4f} {r.stderr:8.4f} {row['vs_f16']:+8.2%} "
              f"{'' if agree is None else agree:>11} {'' if forced is None else forced:>9} {per_token:11.1f} {row['seconds']:6.0f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "ctx": args.ctx, "windows": args.windows, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
