"""The serving section of docs/performance.md, measured in one run on this machine by hearth's own tools:

1. `hearth plan MODEL --json` for each downloaded catalog model (and this machine's bandwidth);
2. llama.cpp's `llama-server` and `hearth serve` started one after the other on the same GGUF, with
   the same thread count and parallel slots;
3. `hearth bench --url` against each, on the same seeded workloads (chat at concurrency 1, then a
   sweep of 1/8/32 streams), repeats interleaved (llama.cpp, hearth, llama.cpp, ...) so load from
   other processes lands on both alike; each server's peak RSS read per level (--server-pid);
4. `hearth bench --report` renders the machine, the plan and the tables with hearth / llama.cpp
   ratios (medians of the repeats) as markdown: written to --section, and with --write-readme put
   between `<!-- perf:begin -->` and `<!-- perf:end -->` in docs/performance.md.

    .venv/bin/python benchmarks/readme_performance.py                 # ~10 min on 2 quiet cores
    .venv/bin/python benchmarks/readme_performance.py --write-readme  # and replace that section
    .venv/bin/python benchmarks/readme_performance.py --dry-run       # print what it would run

Build llama-server first: benchmarks/setup_llama_server.sh.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_serving beside us, also when imported
from bench_serving import CTX_PER_SEQ, LLAMA_SERVER, ROOT, free_port, wait_healthy  # noqa: E402

from hearth import openmp  # noqa: E402
from hearth.bench.readme_section import replace_section, write_section  # noqa: E402
from hearth.cli import main as hearth  # noqa: E402
from hearth.errors import HearthError  # noqa: E402
from hearth.loader.catalog import CATALOG  # noqa: E402
from hearth.loader.resolve import resolve_model  # noqa: E402

SEED_STRIDE = 100
"""Workload w, repeat r uses seed + w * SEED_STRIDE + r: no two runs share prompts, so neither
engine's prompt cache flatters a later run's TTFT."""


@dataclass(frozen=True)
class Engine:
    command: Callable[[argparse.Namespace, Path, int], list[str]]
    """(settings, GGUF, port) -> the server's argv."""
    version: Callable[[argparse.Namespace], str]


def llama_server_command(args, gguf: Path, port: int) -> list[str]:
    # -np slots with -c slots x ctx: each slot gets the context hearth's --max-model-len gives a sequence
    return [str(args.llama_server), "-m", str(gguf), "--port", str(port), "-t", str(args.threads),
            "-tb", str(args.threads), "-np", str(args.slots), "-c", str(args.slots * args.ctx), "-cb", "--no-webui"]


def hearth_serve_command(args, gguf: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "hearth", "serve", str(gguf), "--port", str(port), "--threads", str(args.threads),
            "--max-num-seqs", str(args.slots), "--max-model-len", str(args.ctx), "--log-level", "warning"]


def llama_server_version(args) -> str:
    done = subprocess.run([str(args.llama_server), "--version"], capture_output=True, text=True, timeout=30)
    line = next((ln for ln in (done.stdout + done.stderr).splitlines() if ln.startswith("version:")), "")
    return line.removeprefix("version:").strip() or "version unknown"


def hearth_version(args) -> str:
    try:
        version = metadata.version("hearth")
    except metadata.PackageNotFoundError:
        version = "version unknown"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return version + (f", commit {commit.stdout.strip()}" if commit.returncode == 0 else "")


# label -> engine; the first is the baseline that every ratio divides by
SERVERS: dict[str, Engine] = {
    "llama.cpp": Engine(llama_server_command, llama_server_version),
    "hearth": Engine(hearth_serve_command, hearth_version),
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m", help="the GGUF both servers serve (default: %(default)s)")
    ap.add_argument("--plan-models", nargs="+", help="models for `hearth plan` (default: the downloaded catalog)")
    ap.add_argument("--threads", type=int, default=2, help="threads of each server (default: %(default)s)")
    ap.add_argument("--ctx", type=int, default=CTX_PER_SEQ, help="context per sequence (default: %(default)s)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each workload per engine (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=0, help="first workload seed (default: %(default)s)")
    ap.add_argument("--chat-requests", type=int, default=4,
                    help="chat at concurrency 1: requests (default: %(default)s)")
    ap.add_argument("--chat-tokens", type=int, default=64, help="chat: tokens per request (default: %(default)s)")
    ap.add_argument("--sweep", default="1,8,32", help="concurrency levels of the sweep; the largest is the "
                                                     "servers' parallel slots (default: %(default)s)")
    ap.add_argument("--sweep-requests", type=int, help="sweep: requests per level (default: 2 x the level)")
    ap.add_argument("--sweep-tokens", type=int, default=32, help="sweep: tokens per request (default: %(default)s)")
    ap.add_argument("--device", default="this", help="whose bandwidth sets the ceilings (default: %(default)s)")
    ap.add_argument("--llama-server", type=Path, default=LLAMA_SERVER, help="(default: %(default)s)")
    ap.add_argument("--out", type=Path, help="folder for every file (default: bench-results/readme-<time>)")
    ap.add_argument("--section", type=Path, help="the markdown section (default: OUT/perf_section.md)")
    ap.add_argument("--write-readme", nargs="?", type=Path, const=ROOT / "docs" / "performance.md", metavar="FILE",
                    help="replace the text between the perf markers of FILE (default: docs/performance.md)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = ap.parse_args(argv)
    args.out = args.out or ROOT / "bench-results" / time.strftime("readme-%Y%m%d-%H%M%S")
    args.section = args.section or args.out / "perf_section.md"
    return args


def check(args: argparse.Namespace) -> None:
    """Everything that can be wrong before ten minutes of measuring, as one-line errors."""
    for name in ("threads", "ctx", "repeats", "chat_requests", "chat_tokens", "sweep_tokens", "sweep_requests"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise HearthError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    try:
        levels = [int(x) for x in args.sweep.split(",")]
    except ValueError:
        levels = [0]
    if min(levels) < 1:
        raise HearthError(f"--sweep must be comma-separated numbers of 1 or more such as 1,8,32, got {args.sweep!r}")
    args.slots = max(levels)  # the largest level sets both servers' parallel slots
    if args.write_readme is not None:
        try:
            text = args.write_readme.read_text(encoding="utf-8")
        except OSError as e:
            raise HearthError(f"--write-readme {args.write_readme}: {e.strerror or e}") from None
        replace_section(text, "", str(args.write_readme))  # the markers are there, once each
    if not args.dry_run and not args.llama_server.is_file():
        raise HearthError(f"{args.llama_server} is missing: run benchmarks/setup_llama_server.sh")


def plan_models(args: argparse.Namespace) -> list[str]:
    if args.plan_models:
        return args.plan_models
    have = []
    for name in CATALOG:
        with contextlib.suppress(HearthError):
            resolve_model(name, download=False, progress=False)
            have.append(name)
    return have


def workloads(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    """(folder name, `hearth bench` workload arguments)."""
    sweep = ["--workload", "concurrency-sweep", "--levels", args.sweep, "--max-tokens", str(args.sweep_tokens)]
    if args.sweep_requests:
        sweep += ["--requests", str(args.sweep_requests)]
    return [("chat-c1", ["--workload", "chat", "--concurrency", "1", "--requests", str(args.chat_requests),
                         "--max-tokens", str(args.chat_tokens)]),
            ("sweep", sweep)]


def bench_jobs(args, gguf: Path, servers: dict[str, tuple[str, str]]) -> list[tuple[str, list[str]]]:
    """(progress title, `hearth bench` argv) in run order: per workload, per repeat, each engine."""
    jobs = []
    for w, (name, workload) in enumerate(workloads(args)):
        for rep in range(args.repeats):
            seed = args.seed + w * SEED_STRIDE + rep
            for label, (url, pid) in servers.items():
                folder = args.out / "runs" / name / f"seed{seed}" / label
                # the first engine writes the reference; the others' greedy outputs are compared with it
                argv = ["bench", "--url", url, "--model", str(gguf), "--label", label, "--threads", str(args.threads),
                        "--server-pid", pid, "--device", args.device, "--seed", str(seed), "--ignore-eos",
                        "--reference", str(args.out / "references" / f"{name}-seed{seed}.json"),
                        "--output", str(folder), *workload]
                jobs.append((f"{name} repeat {rep + 1}/{args.repeats}: {label}", argv))
    return jobs


def run_tool(argv: list[str], capture: bool = False) -> str:
    """One `hearth` command in this process; its stdout returned when captured."""
    print(f"$ hearth {shlex.join(argv)}", file=sys.stderr, flush=True)
    out = io.StringIO()
    with contextlib.redirect_stdout(out) if capture else contextlib.nullcontext():
        code = hearth(argv)
    if code:
        raise HearthError(f"`hearth {argv[0]}` failed with exit status {code} (its error is above)")
    return out.getvalue()


@contextlib.contextmanager
def running_servers(args, gguf: Path):
    """Start each engine's server in turn (the next once the last is healthy); stop all at the end."""
    procs, servers = [], {}
    (args.out / "logs").mkdir(parents=True, exist_ok=True)
    try:
        for label, engine in SERVERS.items():
            port, log = free_port(), args.out / "logs" / f"{label}.log"
            with open(log, "w") as sink:
                proc = subprocess.Popen(engine.command(args, gguf, port), cwd=ROOT, stdout=sink,
                                        stderr=subprocess.STDOUT, env=openmp.peer_env())
            procs.append(proc)
            url = f"http://127.0.0.1:{port}"
            try:
                wait_healthy(url, proc)
            except SystemExit as e:
                raise HearthError(f"{label}: {e} (log: {log})") from None
            print(f"{label} ready at {url} (pid {proc.pid})", file=sys.stderr, flush=True)
            servers[label] = (url, str(proc.pid))
        yield servers
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def shown(argv: list[str], gguf: Path) -> str:
    """A server's command as the report shows it: no port, the GGUF by name, `hearth` for python -m hearth."""
    if argv[:3] == [sys.executable, "-m", "hearth"]:
        head, words = "hearth", argv[3:]
    else:
        head, words = Path(argv[0]).name, argv[1:]
    i = words.index("--port")
    words = words[:i] + words[i + 2:]
    return shlex.join([head, *(gguf.name if w == str(gguf) else w for w in words)])


def engines_note(args, gguf: Path, minutes: float) -> str:
    engines = "; ".join(f"{label} ({engine.version(args)}): `{shown(engine.command(args, gguf, 0), gguf)}`"
                        for label, engine in SERVERS.items())
    order = ", ".join([*SERVERS, next(iter(SERVERS))])
    return (f"Engines: {engines}. Each server measured over HTTP by `hearth bench --url` on this machine, "
            f"runs interleaved ({order}, ...); made by `benchmarks/readme_performance.py` in {minutes:.1f} min.")


def dry_run(args, gguf: Path, models: list[str]) -> None:
    for m in models:
        print(f"hearth {shlex.join(plan_argv(args, m))}")
    for label, engine in SERVERS.items():
        print(shlex.join(engine.command(args, gguf, 0)).replace("--port 0", "--port <port>"))
    placeholders = {label: (f"http://127.0.0.1:<{label} port>", f"<{label} pid>") for label in SERVERS}
    for _, argv in bench_jobs(args, gguf, placeholders):
        print(f"hearth {shlex.join(argv)}")
    print(f"hearth bench --report {args.out}/runs/*/*/*/results.json --plan {args.out}/plan/*.json "
          f"--baseline {next(iter(SERVERS))} --markdown {args.section}")


def plan_argv(args, model: str) -> list[str]:
    return ["plan", model, "--json", "--ctx", str(args.ctx), "--concurrency", str(args.slots), "--device", args.device]


def measure(args, gguf: Path, models: list[str]) -> str:
    start = time.monotonic()
    plans = []
    for m in models:
        plans.append(args.out / "plan" / f"{Path(m).name}.json")
        plans[-1].parent.mkdir(parents=True, exist_ok=True)
        plans[-1].write_text(run_tool(plan_argv(args, m), capture=True))
    results = []
    with running_servers(args, gguf) as servers:
        jobs = bench_jobs(args, gguf, servers)
        for i, (title, argv) in enumerate(jobs, 1):
            print(f"\n[{i}/{len(jobs)}] {title} (load average {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
            run_tool(argv)
            results.append(argv[argv.index("--output") + 1])
    note = engines_note(args, gguf, (time.monotonic() - start) / 60)
    run_tool(["bench", "--report", *results, *(["--plan", *map(str, plans)] if plans else []),
              "--baseline", next(iter(SERVERS)), "--note", note, "--markdown", str(args.section)])
    return args.section.read_text(encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        check(args)
        gguf = resolve_model(args.model, download=False, progress=False)
        models = plan_models(args)
        if args.dry_run:
            dry_run(args, gguf, models)
            return 0
        section = measure(args, gguf, models)
        print(f"\n{section}")
        print(f"wrote {args.section}", file=sys.stderr)
        if args.write_readme is not None:
            write_section(args.write_readme, section)
            print(f"replaced the performance section of {args.write_readme}", file=sys.stderr)
    except HearthError as e:
        print(f"readme_performance: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
