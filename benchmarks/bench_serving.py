"""Serving benchmark (issue 4, point 9): N concurrent streaming chat clients against `hearth serve`
and against llama.cpp's `llama-server` (parallel slots) on the same GGUF and thread count, in one
run; reports TTFT p50/p99, inter-token latency p50/p99 and aggregate output tokens/s per N, and the
hearth / llama.cpp ratios.

Both servers are measured by the same client (hearth.bench's OpenAI SSE client, one thread per
stream, greedy, ignore_eos so every request generates exactly --max-tokens), with the same seeded
chat prompts. Levels are interleaved (hearth, llama.cpp, hearth, ...) and repeated; medians are
reported. Build llama-server first: benchmarks/setup_llama_server.sh.

    .venv/bin/python benchmarks/bench_serving.py --concurrency 1,8,32 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from hearth import openmp
from hearth.bench.harness import run_workload
from hearth.bench.http_client import HttpClient
from hearth.bench.metrics.levels import level_summary
from hearth.bench.workloads import build_workload

ROOT = Path(__file__).resolve().parent.parent
MODEL = Path.home() / ".cache/hearth/models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
LLAMA_SERVER = Path(os.environ.get("LLAMA_SERVER_BUILD_DIR", "/work/llama-server-build")) / "bin/llama-server"
CTX_PER_SEQ = 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode} before it was ready: {url}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"{url} not healthy after {timeout:.0f}s")


def start_servers(model: Path, threads: int, slots: int) -> dict[str, tuple[str, subprocess.Popen]]:
    ctx = slots * CTX_PER_SEQ
    hp, lp = free_port(), free_port()
    commands = {
        "hearth": [sys.executable, "-m", "hearth", "serve", str(model), "--port", str(hp), "--threads", str(threads),
                   "--max-num-seqs", str(slots), "--max-model-len", str(CTX_PER_SEQ), "--log-level", "warning"],
        "llama.cpp": [str(LLAMA_SERVER), "-m", str(model), "--port", str(lp), "-t", str(threads), "-tb", str(threads),
                      "-np", str(slots), "-c", str(ctx), "-cb", "--log-disable"],
    }
    servers = {}
    for name, cmd in commands.items():
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=openmp.peer_env())
        url = f"http://127.0.0.1:{hp if name == 'hearth' else lp}"
        servers[name] = (url, proc)
        wait_healthy(url, proc)
        print(f"{name} ready at {url}", file=sys.stderr)
    return servers


def measure(url: str, n: int, max_tokens: int, seed: int) -> dict:
    """One closed-loop level of n users, 2n requests, after one untimed warm-up request."""
    workload = build_workload("chat", seed=seed, requests=2 * n, concurrency=n, max_tokens=max_tokens)
    runs = run_workload(HttpClient(url, ignore_eos=True, seed=seed), workload, progress=True, warmup=1)
    return level_summary(runs[0])


def row(summaries: list[dict]) -> dict:
    def med(f):
        return statistics.median(f(s) for s in summaries)

    return {
        "tok_s": med(lambda s: s["output_tok_s"]),
        "ttft_p50": med(lambda s: s["ttft_s"]["p50"]), "ttft_p99": med(lambda s: s["ttft_s"]["p99"]),
        "itl_p50": med(lambda s: s["itl_s"]["p50"]), "itl_p99": med(lambda s: s["itl_s"]["p99"]),
        "failed": sum(s["failed"] for s in summaries),
    }


def print_table(n: int, rows: dict[str, dict]) -> None:
    h, l = rows["hearth"], rows["llama.cpp"]
    print(f"\nN = {n} concurrent streams")
    print(f"| metric | llama.cpp | hearth | hearth / llama.cpp |\n|---|---|---|---|")
    print(f"| aggregate output tok/s | {l['tok_s']:.1f} | {h['tok_s']:.1f} | {h['tok_s'] / l['tok_s']:.2f}x |")
    for key, label in (("ttft_p50", "TTFT p50 (s)"), ("ttft_p99", "TTFT p99 (s)")):
        print(f"| {label} | {l[key]:.2f} | {h[key]:.2f} | {h[key] / l[key]:.2f}x |")
    for key, label in (("itl_p50", "ITL p50 (ms)"), ("itl_p99", "ITL p99 (ms)")):
        print(f"| {label} | {l[key] * 1e3:.0f} | {h[key] * 1e3:.0f} | {h[key] / l[key]:.2f}x |")
    if h["failed"] or l["failed"]:
        print(f"failed requests: hearth {h['failed']}, llama.cpp {l['failed']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=MODEL)
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if not LLAMA_SERVER.exists():
        raise SystemExit(f"{LLAMA_SERVER} is missing: run benchmarks/setup_llama_server.sh")
    levels = [int(x) for x in args.concurrency.split(",")]
    servers = start_servers(args.model, args.threads, max(levels))
    results: dict[int, dict[str, list[dict]]] = {}
    try:
        for n in levels:
            for rep in range(args.repeats):
                for name, (url, _) in servers.items():
                    print(f"N={n} repeat {rep + 1}/{args.repeats}: {name} "
                          f"(load average {os.getloadavg()[0]:.1f})", file=sys.stderr)
                    results.setdefault(n, {}).setdefault(name, []).append(
                        measure(url, n, args.max_tokens, seed=rep))
            print_table(n, {name: row(s) for name, s in results[n].items()})
    finally:
        for _, proc in servers.values():
            proc.terminate()
    if args.json:
        args.json.write_text(json.dumps({str(n): v for n, v in results.items()}, indent=1))


if __name__ == "__main__":
    main()
