"""`hearth plan MODEL`: will it fit, how long a context, how many users, how fast at best — from
first principles, before loading anything. Every number comes with its one-line reason."""

from __future__ import annotations

import argparse
import json

from hearth.memory.devices import THIS, known_devices
from hearth.memory.figure_text import FIGURES
from hearth.memory.kv_formats import KV_FORMATS
from hearth.memory.overhead import DEFAULT_BATCH_TOKENS
from hearth.memory.planner import Plan
from hearth.memory.request import DEFAULT_BLOCK, plan_for


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="a .gguf path, catalog name, org/repo:file.gguf, architecture preset "
                                 "(llama-70b, mixtral-8x7b, ...) or description "
                                 "(layers=32,hidden=4096,heads=32,kv_heads=8,ffn=14336,vocab=128256,quant=Q4_K_M)")
    p.add_argument("--device", default=THIS, help=f"one of: {', '.join(known_devices())} (default: %(default)s)")
    p.add_argument("--ctx", type=int, default=None, help="context length in tokens (default: the model's)")
    p.add_argument("--concurrency", type=int, default=1, help="sequences served at once (default: %(default)s)")
    p.add_argument("--kv-cache-dtype", default="auto",
                   help=f"auto (f16), {', '.join(KV_FORMATS)} (default: %(default)s)")
    p.add_argument("--block-size", type=int, default=None,
                   help=f"tokens per KV block (default: {DEFAULT_BLOCK}; KVarN: its 128-token tile)")
    p.add_argument("--batch-tokens", type=int, default=DEFAULT_BATCH_TOKENS,
                   help="tokens one engine step runs, prefill chunks included (default: %(default)s)")
    p.add_argument("--memory-gib", type=float, default=None,
                   help="the device's memory in GiB, for a model of it with another size (a 64GB Mac: 64)")
    p.add_argument("--remeasure", action="store_true", help="measure this machine again (bandwidth, FLOP/s)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the report")


def main(args: argparse.Namespace) -> int:
    result = plan_for(args.model, device=args.device, ctx=args.ctx, concurrency=args.concurrency,
                      kv_cache_dtype=args.kv_cache_dtype, block_size=args.block_size,
                      batch_tokens=args.batch_tokens, memory_gib=args.memory_gib, remeasure=args.remeasure,
                      progress=not args.json)
    if args.json:
        data = result.to_json()
        data["inputs"]["model_arg"] = args.model  # as the user named it: reports show this, not general.name
        print(json.dumps(data, indent=1))
    else:
        print(format_plan(result))
    return 0


def format_plan(p: Plan) -> str:
    r, s = p.request, p.request.shape
    lines = [f"model     {s.name} ({s.arch}, {s.num_layers} layers"
             f"{f', {s.active_experts} of {s.num_experts} experts' if s.is_moe else ''}"
             f"{f', {s.num_sliding} sliding-window layers' if s.num_sliding else ''})",
             f"device    {r.device.name}",
             f"workload  {r.ctx:,} tokens x {r.concurrency} sequence(s), KV {r.kv.name} in blocks of {r.block_size}"]
    section = None
    for key, fig in p.figures.items():
        if key == "decode_tok_s_ceiling_aggregate" and r.concurrency == 1:
            continue  # the same number as the single-sequence ceiling
        sec, label, show = FIGURES[key]
        if sec != section:
            lines.append(f"\n{sec}")
            section = sec
        lines.append(f"  {label:<17} {show(fig.value):>18}   {fig.reason}")
    return "\n".join(lines)
