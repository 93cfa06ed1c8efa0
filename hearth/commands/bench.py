"""`hearth bench`: measure the in-process engine, or any OpenAI-compatible server with --url, on a
seeded workload; report latencies, throughput against the decode ceiling, peak memory and greedy
agreement with a reference run; write results.json, reference.json and PNG charts."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hearth.bench import BenchError
from hearth.bench.workloads import WORKLOADS
from hearth.config import DEFAULT_MODEL
from hearth.errors import HearthError
from hearth.memory.devices import THIS, known_devices


def add_arguments(p: argparse.ArgumentParser) -> None:
    about = "; ".join(f"{name}: {spec.about}" for name, spec in WORKLOADS.items())
    p.add_argument("--workload", default="chat", help=f"{about} (default: %(default)s)")
    p.add_argument("--url", help="an OpenAI-compatible server (http://host:port, its /v1, or its "
                                 "/v1/chat/completions) to measure instead of the in-process engine")
    p.add_argument("--model", help=f"in-process: the model to load (default: {DEFAULT_MODEL}); with --url: "
                                   "the model name to request, or a local GGUF of the served model to "
                                   "compare with the decode ceiling")
    p.add_argument("--served-model", help="with --url: the model name to request (default: --model when it "
                                          "is not a local file, else the first one the server lists)")
    p.add_argument("--api-key", help="with --url: sent as a bearer token")
    p.add_argument("--concurrency", type=int, help="requests in flight at once; for concurrency-sweep the "
                                                   "highest level (default: the workload's)")
    p.add_argument("--requests", type=int, help="requests to send (per level in a sweep; default: the workload's)")
    p.add_argument("--max-tokens", type=int, help="tokens to generate per request (default: the workload's)")
    p.add_argument("--seed", type=int, default=0, help="picks the prompts; same seed, same prompts (default: 0)")
    p.add_argument("--warmup", type=int, default=1, help="untimed requests sent first (default: %(default)s)")
    p.add_argument("--ignore-eos", action="store_true", help="generate --max-tokens tokens whatever the model says")
    p.add_argument("--output", help="folder for results (default: ./bench-results/<timestamp>)")
    p.add_argument("--reference", help="an earlier run's reference.json to compare greedy outputs with; "
                                       "written by this run when it does not exist yet")
    p.add_argument("--ctx", type=int, default=4096, help="in-process: context length (default: %(default)s)")
    p.add_argument("--threads", type=int, default=0, help="in-process: CPU threads (default: all cores)")
    p.add_argument("--device", default=THIS, help=f"whose bandwidth sets the decode ceiling: "
                                                  f"{', '.join(known_devices())} (default: %(default)s)")


def main(args: argparse.Namespace) -> int:
    from hearth.bench.report import format_summary
    from hearth.bench.session import bench_setup, run_bench

    setup = bench_setup(args.workload, args.seed, args.requests, args.concurrency, args.max_tokens,
                        args.output, args.reference, warmup=args.warmup)
    client, roof, target = _remote(args) if args.url else _local(args, setup.workload)
    results, files, note = run_bench(setup, client, roof, target)
    if note:
        print(note, file=sys.stderr)
    print(format_summary(results, [str(f) for f in files]))
    return 0


def _local(args: argparse.Namespace, workload):
    if args.ctx < 1:
        raise BenchError(f"--ctx must be a positive number of tokens, got {args.ctx}")
    if args.threads < 0:
        raise BenchError(f"--threads must be 0 (all cores) or more, got {args.threads}")
    from hearth.bench.ceiling import decode_roofline
    from hearth.bench.local_client import LocalClient
    from hearth.llm import LLM
    from hearth.loader.resolve import resolve_model
    from hearth.memory.devices import get_device

    model = args.model or DEFAULT_MODEL
    path = resolve_model(model)  # a missing model or unknown device fails before anything loads
    device = get_device(args.device)
    llm = LLM(str(path), max_num_seqs=workload.max_concurrency, max_model_len=args.ctx, threads=args.threads)
    cfg = llm.config
    client = LocalClient(llm.engine, llm.encode_chat, llm.max_model_len, args.seed, args.ignore_eos)
    roof = decode_roofline(llm.gguf, device, cfg.kv_cache_dtype, cfg.block_size)
    target = {"model": model, "model_path": str(llm.path), "max_model_len": llm.max_model_len,
              "kv_cache_dtype": cfg.kv_cache_dtype, "device": device.name, "load_s": llm.load_time}
    return client, roof, target


def _remote(args: argparse.Namespace):
    from hearth.bench.ceiling import decode_roofline
    from hearth.bench.http_client import HttpClient
    from hearth.memory.devices import get_device

    path = _local_gguf(args.model)
    served = args.served_model or (args.model if path is None else None)
    client = HttpClient(args.url, served, args.api_key, args.seed, args.ignore_eos)
    client.discover()
    roof = decode_roofline(path, get_device(args.device)) if path else None
    target = {"url": args.url, "served_model": client.served_model, "model": args.model,
              "model_path": str(path) if path else None, "device": roof.device.name if roof else None}
    return client, roof, target


def _local_gguf(model: str | None) -> Path | None:
    """The served model's file here, for the ceiling: a path or a downloaded catalog name."""
    from hearth.loader.resolve import resolve_model

    if model is None:
        return None
    if model.endswith(".gguf") and ":" not in model and not Path(model).expanduser().is_file():
        raise BenchError(f"--model {model}: no such file")
    try:
        return resolve_model(model, download=False, progress=False)
    except HearthError:
        return None
