"""`hearth bench`: measure the in-process engine, or any OpenAI-compatible server with --url, on a
seeded workload; report latencies, throughput against the decode ceiling, peak memory and greedy
agreement with a reference run; write results.json, reference.json, report.md and PNG charts.
`hearth bench --report RESULTS...` renders earlier runs (several engines, repeats) as markdown."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from hearth.bench import BenchError
from hearth.bench.workloads import WORKLOADS
from hearth.commands.human_ints import token_count
from hearth.commands.threads_flag import THREADS_HELP, thread_count
from hearth.config import DEFAULT_MODEL
from hearth.errors import HearthError
from hearth.memory.devices import THIS, known_devices


def add_arguments(p: argparse.ArgumentParser) -> None:
    about = "; ".join(f"{name}: {spec.about}" for name, spec in WORKLOADS.items())
    p.add_argument("--workload", default="chat", help=f"{about} (default: %(default)s)")
    p.add_argument("--url", help="an OpenAI-compatible server (http://host:port, its /v1, or its "
                                 "/v1/chat/completions) to measure instead of the in-process engine")
    # MODEL and -m, as hearth run and serve take a model (and llama-bench's -m): `hearth bench m` was unrecognized
    p.add_argument("model_word", nargs="?", default=None, metavar="MODEL", help="the model, as --model")
    p.add_argument("--model", "-m", help=f"in-process: the model to load (default: {DEFAULT_MODEL}); with --url: "
                                         "the model name to request, or a local GGUF of the served model to "
                                         "compare with the decode ceiling")
    p.add_argument("--served-model", help="with --url: the model name to request (default: --model when it "
                                          "is not a local file, else the first one the server lists)")
    p.add_argument("--api-key", help="with --url: sent as a bearer token")
    p.add_argument("--concurrency", type=int, help="requests in flight at once; for concurrency-sweep the "
                                                   "highest level (default: the workload's)")
    p.add_argument("--levels", help="concurrency levels to run one after the other, e.g. 1,8,32 "
                                    "(default: --concurrency; for concurrency-sweep 1, 2, 4, ... up to it)")
    p.add_argument("--requests", type=int, help="requests to send (per level in a sweep; default: the workload's)")
    p.add_argument("--max-tokens", "-n", type=int, help="tokens to generate per request (default: the workload's; "
                                                        "-n: llama-bench's spelling)")
    p.add_argument("--seed", type=int, default=0, help="picks the prompts; same seed, same prompts (default: 0)")
    p.add_argument("--warmup", type=int, default=1, help="untimed requests sent first (default: %(default)s)")
    p.add_argument("--ignore-eos", action="store_true", help="generate --max-tokens tokens whatever the model says")
    p.add_argument("--output", help="folder for results (default: ./bench-results/<timestamp>)")
    p.add_argument("--reference", help="an earlier run's reference.json to compare greedy outputs with; "
                                       "written by this run when it does not exist yet")
    p.add_argument("--ctx", "-c", "--ctx-size", type=token_count, default=4096, metavar="N",
                   help="in-process: context length in tokens (or 32k, 32K, auto), at most the model's; 0: the "
                        "model's; -c/--ctx-size: llama.cpp's spelling, as run's (default: %(default)s)")
    p.add_argument("--threads", type=thread_count, default=0,
                   help=f"in-process: CPU threads; {THREADS_HELP} (default: 0); with --url: the server's, stated in "
                        "the report")
    p.add_argument("--speculative-config", default=None, metavar="JSON",
                   help='in-process: speculative decoding, vLLM\'s config as `hearth serve` takes it, e.g. '
                        '\'{"method": "suffix"}\'; the report gives the acceptance length and scales the '
                        "decode ceiling by it")
    p.add_argument("--device", default=THIS, help=f"whose bandwidth sets the decode ceiling: "
                                                  f"{', '.join(known_devices())} (default: %(default)s)")
    p.add_argument("--label", help="the target's name in reports, e.g. hearth or llama.cpp (default: "
                                   "hearth (in-process), or the served model at its host)")
    p.add_argument("--server-pid", type=int, help="with --url: the server's process id on this machine, to "
                                                  "report its peak memory per level (its kernel peak-RSS "
                                                  "mark is reset before each level)")
    report = p.add_argument_group("reports")
    report.add_argument("--report", nargs="+", metavar="RESULTS",
                        help="measure nothing: render these results.json files (or run folders) of one or "
                             "more targets, workloads and repeats as markdown; ratios are to the first target")
    report.add_argument("--plan", nargs="+", metavar="PLAN_JSON", default=[],
                        help="`hearth plan MODEL --json` outputs to show in the report")
    report.add_argument("--baseline", metavar="LABEL", help="the target that ratios divide by (default: "
                                                            "the first one in --report)")
    report.add_argument("--note", help="a paragraph under the machine line, e.g. how the servers were started")
    report.add_argument("--markdown", metavar="FILE", help="where the markdown report goes, - for standard "
                                                           "output (default: report.md in the output folder; "
                                                           "with --report: standard output)")


def main(args: argparse.Namespace) -> int:
    from hearth.bench.markdown import render_markdown
    from hearth.bench.report import format_summary
    from hearth.bench.saved import load_plans, load_results
    from hearth.bench.session import bench_setup, run_bench

    if args.model_word is not None:
        if args.model is not None and args.model != args.model_word:
            raise BenchError(f"MODEL {args.model_word!r} and --model {args.model!r} both name the model: give one")
        args.model = args.model_word
    plans = load_plans(args.plan)
    if args.report:
        if args.url:
            raise BenchError("--report renders earlier results and measures nothing; drop --url")
        _write_markdown(args.markdown or "-", render_markdown(load_results(args.report), plans, args.note,
                                                             args.baseline))
        return 0
    if args.url and args.speculative_config:
        raise BenchError("--speculative-config sets up the in-process engine; start the server at --url with it")
    if args.threads < 0:
        raise BenchError(f"--threads must be 0 (all cores) or more, got {args.threads}")
    setup = bench_setup(args.workload, args.seed, args.requests, args.concurrency, args.max_tokens,
                        args.output, args.reference, warmup=args.warmup, levels=_levels(args.levels))
    client, roof, target, memory = _remote(args) if args.url else _local(args, setup.workload)
    target.update(label=args.label, ignore_eos=args.ignore_eos,
                  bandwidth=roof.device.bandwidth if roof is not None else None)
    remeasure = _remeasure(args.device) if roof is not None else None
    results, files, note = run_bench(setup, client, roof, target, memory, remeasure)
    markdown = args.markdown or str(setup.folder / "report.md")
    _write_markdown(markdown, render_markdown([results], plans, args.note))
    if note:
        print(note, file=sys.stderr)
    print(format_summary(results, [str(f) for f in files] + ([markdown] if markdown != "-" else [])))
    return 0


def _remeasure(device: str):
    """This machine measured again, where --device is it (a preset's figures do not change)."""
    from hearth.memory.devices import device_key, get_device

    return (lambda: get_device(THIS, refresh=True)) if device_key(device) == THIS else None


def _levels(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise BenchError(f"--levels must be comma-separated numbers such as 1,8,32, got {text!r}") from None


def _write_markdown(dest: str, text: str) -> None:
    if dest == "-":
        print(text, end="")
        return
    try:
        Path(dest).parent.mkdir(parents=True, exist_ok=True)
        Path(dest).write_text(text, encoding="utf-8")
    except OSError as e:
        raise BenchError(f"--markdown {dest}: cannot write: {e.strerror or e}") from None


def _local(args: argparse.Namespace, workload):
    if args.ctx < 0:  # 0: the model's own, as run's and serve's
        raise BenchError(f"--ctx must be a number of tokens (0: the model's own), got {args.ctx}")
    if args.server_pid is not None:
        raise BenchError("--server-pid goes with --url; an in-process run measures its own memory")
    from dataclasses import asdict

    from hearth.spec_decode.config import SpeculativeConfig
    from hearth.bench.ceiling import decode_roofline
    from hearth.bench.local_client import LocalClient
    from hearth.bench.rss import MemoryProbe
    from hearth.commands.run import check_max_tokens_fit, header_context
    from hearth.llm import LLM
    from hearth.loader.resolve import resolve_model
    from hearth.memory.devices import device_key, get_device

    model = args.model or DEFAULT_MODEL
    spec = SpeculativeConfig.parse(args.speculative_config)  # bad input: one line, before the load
    path = resolve_model(model)  # a missing model or unknown device fails before anything loads
    if device_key(args.device) != THIS:  # a preset, or an unknown name's one line
        get_device(args.device)
    # run's check, before the load and before a first run measures this machine (a doomed run waits for nothing)
    check_max_tokens_fit(args.max_tokens, *header_context(str(path), args.ctx))
    llm = LLM(str(path), max_num_seqs=workload.max_concurrency, max_model_len=args.ctx, threads=args.threads,
              speculative_config=None if spec is None else asdict(spec))
    cfg = llm.config
    client = LocalClient(llm.engine, llm.encode_chat, llm.max_model_len, args.seed, args.ignore_eos)
    client.prepare(workload)  # every prompt fits, or one line before a first run measures this machine
    device = get_device(args.device)
    roof = decode_roofline(llm.gguf, device, cfg.kv_cache_dtype, cfg.block_size)
    target = {"model": model, "model_path": str(llm.path), "max_model_len": llm.max_model_len,
              "kv_cache_dtype": cfg.kv_cache_dtype, "device": device.name, "load_s": llm.load_time,
              "threads": args.threads or os.cpu_count(),
              "speculative_config": asdict(llm.engine.spec.config) if llm.engine.spec is not None else None}
    return client, roof, target, MemoryProbe()


def _remote(args: argparse.Namespace):
    from hearth.bench.ceiling import decode_roofline
    from hearth.bench.http_client import HttpClient
    from hearth.bench.rss import MemoryProbe, check_server_pid
    from hearth.memory.devices import get_device

    memory = MemoryProbe(check_server_pid(args.server_pid)) if args.server_pid is not None else None
    path = _local_gguf(args.model)
    served = args.served_model or (args.model if path is None else None)
    client = HttpClient(args.url, served, args.api_key, args.seed, args.ignore_eos)
    client.discover()
    roof = decode_roofline(path, get_device(args.device)) if path else None
    target = {"url": args.url, "served_model": client.served_model, "model": args.model,
              "model_path": str(path) if path else None, "device": roof.device.name if roof else None,
              "threads": args.threads or None}
    return client, roof, target, memory


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
