"""Prefix-aware vs round-robin routing on `hearth cluster serve`, and the cluster vs one `hearth
serve`: `hearth bench --url` with the shared-prefix workload at each concurrency, the prefix-cache
hit rate from /metrics (hits / queries over the run, summed over replicas), TTFT p50/p99, tokens/s.

    .venv/bin/python benchmarks/bench_cluster.py [--model smollm2-135m] [--levels 8,32] [--requests 32]

Each server is started, measured and stopped in turn (a fresh cache for each); a noisy machine
makes single runs differ by ~10%: compare ratios, repeat before trusting a small one."""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2

PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(argv: list[str], port: int, log: Path) -> subprocess.Popen:
    proc = subprocess.Popen([PY, "-m", "hearth", *argv, "--port", str(port)], stdout=log.open("w"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited: see {log}")
        try:
            if httpx2.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx2.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"server did not start: see {log}")


def cache_counts(port: int) -> tuple[float, float]:
    queries = hits = 0.0
    for line in httpx2.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text.splitlines():
        if line.startswith("hearth:prefix_cache_queries_total"):
            queries += float(line.rsplit(" ", 1)[1])
        elif line.startswith("hearth:prefix_cache_hits_total"):
            hits += float(line.rsplit(" ", 1)[1])
    return queries, hits


def measure(label: str, argv: list[str], args, out: Path) -> list[dict]:
    port = free_port()
    proc = start(argv, port, out / f"{label}.log")
    rows = []
    try:
        for seed, c in enumerate(args.levels):
            q0, h0 = cache_counts(port)
            res = out / f"{label}-c{c}"
            subprocess.run([PY, "-m", "hearth", "bench", "--url", f"http://127.0.0.1:{port}", "--workload",
                            "shared-prefix", "--concurrency", str(c), "--requests", str(args.requests),
                            "--max-tokens", str(args.max_tokens), "--seed", str(seed), "--warmup", "0",
                            "--output", str(res)], check=True, stdout=subprocess.DEVNULL)
            q1, h1 = cache_counts(port)
            lv = json.loads((res / "results.json").read_text())["levels"][0]
            rows.append({"server": label, "clients": c, "hit_rate": (h1 - h0) / max(q1 - q0, 1),
                         "ttft_p50": lv["ttft_s"]["p50"], "ttft_p99": lv["ttft_s"]["p99"],
                         "output_tok_s": lv["output_tok_s"], "failed": lv["failed"]})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(60)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--levels", default="8,32", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--only", default="prefix,round-robin,serve", help="which servers to run")
    args = p.parse_args()
    out = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    common = ["--max-model-len", "4096"]
    servers = {
        "prefix": ["cluster", "serve", args.model, "--replicas", str(args.replicas), "--routing", "prefix", *common],
        "round-robin": ["cluster", "serve", args.model, "--replicas", str(args.replicas), "--routing", "round-robin",
                        *common],
        "serve": ["serve", args.model, "--threads", str(args.replicas), *common],
    }
    rows = [r for name in args.only.split(",") for r in measure(name, servers[name], args, out)]
    print("| server | clients | prefix-cache hit rate | TTFT p50 | TTFT p99 | output tok/s |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['server']} | {r['clients']} | {r['hit_rate']:.0%} | {r['ttft_p50']:.2f} s | "
              f"{r['ttft_p99']:.2f} s | {r['output_tok_s']:.1f} |")
    print(f"(raw results in {out})")


if __name__ == "__main__":
    main()
