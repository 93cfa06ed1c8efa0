"""`hearth plan MODEL`: will it fit, how long a context, how many users, how fast at best — from
first principles, before loading anything. Every number comes with its one-line reason."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from hearth.commands.human_ints import token_count
from hearth.loader.catalog import CATALOG
from hearth.memory.devices import THIS, known_devices
from hearth.memory.figure_text import FIGURES
from hearth.memory.kv_formats import SERVED_KV
from hearth.memory.overhead import DEFAULT_BATCH_TOKENS
from hearth.memory import PlanError
from hearth.memory.planner import Plan, PlanRequest
from hearth.memory.replicas import (Machine, ReplicaPlan, Workload, check_workload, parse_machines, plan_replicas,
                                    request_tokens)
from hearth.memory.request import DEFAULT_BLOCK, build_request, plan_for
from hearth.memory.units import flops, nbytes, rate

SERVE_MAX_NUM_SEQS = 16  # hearth serve's --max-num-seqs default: a replica's sequences unless --concurrency


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="a .gguf path, catalog name, org/repo:file.gguf, architecture preset "
                                 "(llama-70b, mixtral-8x7b, ...) or description "
                                 "(layers=32,hidden=4096,heads=32,kv_heads=8,ffn=14336,vocab=128256,quant=Q4_K_M)")
    p.add_argument("--device", default=THIS, help=f"one of: {', '.join(known_devices())}; cpu: this, as serve's "
                                                  "--device cpu (default: %(default)s)")
    p.add_argument("--ctx", "-c", "--ctx-size", type=token_count, default=None, metavar="N",
                   help="context length in tokens (or 32k, 32K), at most the model's; 0: the model's; -c/--ctx-size: "
                        "llama.cpp's spelling (default: the model's)")
    p.add_argument("--concurrency", type=int, default=None,
                   help=f"sequences served at once (default: 1; with --target-rps, per replica: {SERVE_MAX_NUM_SEQS})")
    p.add_argument("--kv-cache-dtype", default="auto",
                   help=f"auto (f16), {', '.join(SERVED_KV)}, as serve takes them (default: %(default)s)")
    p.add_argument("--block-size", type=int, default=None,
                   help=f"tokens per KV block (default: {DEFAULT_BLOCK}; KVarN: its 128-token tile)")
    p.add_argument("--batch-tokens", type=int, default=DEFAULT_BATCH_TOKENS,
                   help="tokens one engine step runs, prefill chunks included (default: %(default)s)")
    p.add_argument("--memory-gib", type=float, default=None,
                   help="the device's memory in GiB, for a model of it with another size (a 64GB Mac: 64)")
    p.add_argument("--remeasure", action="store_true", help="measure this machine again (bandwidth, FLOP/s)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the report")
    r = p.add_argument_group("replicas (hearth cluster serve)")
    r.add_argument("--target-rps", type=float, default=None,
                   help="requests a second to serve: report how many replicas and machines that needs")
    r.add_argument("--prompt-tokens", type=int, default=512, help="prompt tokens of a request (default: %(default)s)")
    r.add_argument("--output-tokens", type=int, default=128, help="output tokens of a request (default: %(default)s)")
    r.add_argument("--threads-per-replica", type=int, default=1, help="CPU threads of a replica (default: %(default)s)")
    r.add_argument("--machines", default=None,
                   help="a count of machines like this one (3), or CORES:MEMORY_GIB,... (16:64,8:32); "
                        "default: as many like this one as it takes")


REPLICA_FLAGS = {"machines": None, "prompt_tokens": 512, "output_tokens": 128, "threads_per_replica": 1}
"""The replica flags and their defaults (add_arguments'): without --target-rps they were ignored without a word."""


def main(args: argparse.Namespace) -> int:
    if args.target_rps is not None:
        return replicas_main(args)
    given = [f"--{k.replace('_', '-')}" for k, default in REPLICA_FLAGS.items() if getattr(args, k) != default]
    if given:
        raise PlanError(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to replica planning: "
                        "add --target-rps R (requests a second)")
    seqs = 1 if args.concurrency is None else args.concurrency
    result = plan_for(args.model, device=args.device, ctx=args.ctx, concurrency=seqs,
                      kv_cache_dtype=args.kv_cache_dtype, block_size=args.block_size,
                      batch_tokens=args.batch_tokens, memory_gib=args.memory_gib, remeasure=args.remeasure,
                      progress=not args.json)
    if args.json:
        data = result.to_json()
        data["inputs"]["model_arg"] = args.model  # as the user named it: reports show this, not general.name
        print(json.dumps(data, indent=1))
    else:
        print(format_plan(result, shown_name(args.model)))
    return 0


def shown_name(model: str) -> str | None:
    """The name a report shows for MODEL: a catalog name as given, a file (or hub reference) by its
    file's name; None (the shape's own) for presets and descriptions. Not the GGUF's general.name,
    which converters often title-case from a directory name ("Smollm2 135M 8k Lc100K Mix1 Ep2")."""
    if model in CATALOG:
        return model
    if Path(model).expanduser().is_file():
        return Path(model).name
    return Path(model.rsplit(":", 1)[-1]).name if model.endswith(".gguf") else None  # org/repo:file.gguf


def _not_run(arch: str) -> str:
    """A file of an architecture hearth cannot load was planned without a word (hearth run then refused it)."""
    from hearth.models.registry import ARCHITECTURES

    if arch == "described" or arch in ARCHITECTURES:
        return ""
    return f"; hearth does not run {arch} models: the figures are the file's sizes, for another engine"


def format_plan(p: Plan, name: str | None = None) -> str:
    r, s = p.request, p.request.shape
    lines = [f"model     {name or s.name} ({s.arch}, {s.num_layers} layers"
             f"{f', {s.active_experts} of {s.num_experts} experts' if s.is_moe else ''}"
             f"{f', {s.num_sliding} sliding-window layers' if s.num_sliding else ''}){_not_run(s.arch)}",
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


def replicas_main(args: argparse.Namespace) -> int:
    work = Workload(args.target_rps, args.prompt_tokens, args.output_tokens, args.threads_per_replica)
    check_workload(work)  # before any measurement
    if args.ctx is not None:
        raise PlanError("--ctx does not apply with --target-rps: a request's context is "
                        "--prompt-tokens + --output-tokens")
    cores = cores_here()
    machines = None if args.machines is None else parse_machines(args.machines, Machine(cores, 0))
    seqs = SERVE_MAX_NUM_SEQS if args.concurrency is None else args.concurrency
    req = build_request(args.model, device=args.device, ctx=args.prompt_tokens + args.output_tokens,
                        concurrency=seqs, kv_cache_dtype=args.kv_cache_dtype,
                        block_size=args.block_size, batch_tokens=args.batch_tokens, memory_gib=args.memory_gib,
                        remeasure=args.remeasure, progress=not args.json, ctx_named=request_tokens(work))
    here = Machine(cores, req.device.memory_bytes)
    machines = machines and [here if m.memory_bytes == 0 else m for m in machines]  # a count: like this one
    rp = plan_replicas(req, work, here, machines)
    if args.json:
        print(json.dumps({"replica_rps": rp.replica_rps, "decode_tok_s": rp.decode_tok_s,
                          "prefill_tok_s": rp.prefill_tok_s, "replica_bytes": int(rp.replica_bytes),
                          "replicas": rp.replicas, "per_machine": rp.per_machine,
                          "machines_needed": rp.machines_needed}, indent=1))
    else:
        print(format_replicas(rp, req))
    return 0


def cores_here() -> int:
    """The core count the measurement of this machine ran on (hearth.memory.this_machine.machine_key)."""
    return os.cpu_count() or 1


def format_replicas(rp: ReplicaPlan, req: PlanRequest) -> str:
    w, t, seqs, d = rp.work, rp.work.threads, req.concurrency, req.device
    need, short = rp.machines_needed, rp.replicas - sum(rp.per_machine)
    where = ("machines like this one" if rp.open_ended else f"of the {len(rp.per_machine)} machines given "
             f"({sum(rp.per_machine)} replicas in all{f', {short} short' if short > 0 else ''})")
    core = f"{rate(d.bandwidth / rp.cores_here)}, {flops(d.peak_flops / rp.cores_here)}/s a core"
    rows = [("per replica", f"{rp.replica_rps:,.2f} req/s",
             f"{t} thread(s) x {core}: prefill {rp.prefill_tok_s:,.0f} tok/s + decode {rp.decode_tok_s:,.1f} "
             f"tok/s ({seqs} sequences at {w.prompt_tokens + w.output_tokens:,} tokens) take turns"),
            ("replicas needed", f"{rp.replicas:,}", f"{w.rps:g} req/s / {rp.replica_rps:,.2f} req/s, rounded up"),
            ("per machine", " ".join(map(str, rp.per_machine[:8])) + (" ..." if len(rp.per_machine) > 8 else ""),
             f"min(cores / {t} thread(s), 90% of memory / {nbytes(rp.replica_bytes)} a replica)"),
            ("machines", f"{need:,}" if need else "NOT ENOUGH", where)]
    head = (f"replicas  {w.rps:g} req/s of {w.prompt_tokens:,} prompt + {w.output_tokens:,} output tokens, "
            f"{seqs} sequences a replica of {t} thread(s), on {d.name}")
    return "\n".join([head, *(f"  {a:<17} {b:>14}   {c}" for a, b, c in rows),
                      "assumes: a machine's replicas share its bandwidth and FLOP/s by threads, at this device's "
                      "figures per core; ceilings, not what an engine reaches"])
