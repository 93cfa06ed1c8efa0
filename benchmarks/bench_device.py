"""Decode and prefill on one device, per model: tok/s, GB/s of weights read and % of the roofline
`hearth plan` gives for the device (the one-sequence decode ceiling: bandwidth / bytes per step).

    python benchmarks/bench_device.py --device cuda --roofline H200 smollm2-135m gemma3-270m qwen2.5-coder-1.5b

Greedy, prefix caching off (a prefill is timed, not a cache hit), medians of --repeats runs. Prints a
markdown table and writes --out (JSON) if given. benchmarks/gpu_check.sh runs it on a GPU."""

from __future__ import annotations

import argparse
import json
import statistics
import time

from hearth import LLM, SamplingParams
from hearth.bench.ceiling import decode_roofline
from hearth.memory.devices import THIS, get_device

PROMPT = "def parse(line):\n    key, value = line.split('=', 1)\n    return key.strip(), value.strip()\n"


def measure(model: str, device: str, roofline: str, tokens: int, prefill: int, repeats: int) -> dict:
    llm = LLM(model, device=device, enable_prefix_caching=False, progress=False, max_num_seqs=1)
    roof = decode_roofline(llm.gguf, get_device(roofline))
    ids = (llm.tokenizer.encode(PROMPT) * (prefill // 20 + 1))[:prefill]
    decode = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
    first = SamplingParams(temperature=0, max_tokens=1)
    llm.generate([{"prompt_token_ids": ids[:16]}], decode)  # warm: kernels compiled, pages resident
    dec, pre = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        llm.generate([{"prompt_token_ids": ids[:16]}], decode)
        dec.append(tokens / (time.perf_counter() - t))
        t = time.perf_counter()
        llm.generate([{"prompt_token_ids": ids}], first)
        pre.append(prefill / (time.perf_counter() - t))
    d, ceiling = statistics.median(dec), roof.decode_tok_s(16 + tokens // 2, 1)
    step_bytes = roof.decode_step_bytes(16 + tokens // 2, 1)
    return {"model": model, "device": llm.backend.name, "about": llm.backend.about, "load_s": round(llm.load_time, 2),
            "decode_tok_s": round(d, 1), "prefill_tok_s": round(statistics.median(pre), 1),
            "decode_gb_s": round(d * step_bytes / 1e9, 1), "roofline": roof.device.name,
            "pct_of_roofline": round(100 * d / ceiling, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="+")
    p.add_argument("--device", default="auto", help="the engine's device (cpu, cuda, torch)")
    p.add_argument("--roofline", default=THIS, help="whose bandwidth sets the ceiling (a `hearth plan` device)")
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--prefill", type=int, default=512)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default="")
    a = p.parse_args()
    rows = [measure(m, a.device, a.roofline, a.tokens, a.prefill, a.repeats) for m in a.models]
    print("| model | device | load s | decode tok/s | GB/s | % of roofline | prefill tok/s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['device']} | {r['load_s']} | {r['decode_tok_s']} | {r['decode_gb_s']} | "
              f"{r['pct_of_roofline']} ({r['roofline']}) | {r['prefill_tok_s']} |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
