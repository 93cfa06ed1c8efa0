"""KV disk tier benchmark (issue 6, point 4): time to first token of a ~4K-token prompt on a cold
`hearth serve` (full prefill) vs the same prompt after the server restarted on the same
--kv-disk-dir (its full blocks read back from disk, verified and loaded; only the last partial block
is computed). Target: >= 10x faster.

One run: server 1 (fresh disk dir) warms up on an unrelated prompt, then prefills R distinct
prompts (different slices of the shipped public-domain text), writing their blocks to disk; it is
stopped (queued writes finish at shutdown). Server 2 starts on the same directory, warms up, and
sends the same R prompts. Medians are reported, with the bytes read back and their rate.

    .venv/bin/python benchmarks/bench_kv_disk.py --tokens 4000 --repeats 3
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEXT = ROOT / "hearth/data/perplexity/persuasion.txt"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, args, kv_dir: Path, log: Path):
        self.port = free_port()
        cmd = [sys.executable, "-m", "hearth", "serve", args.model, "--port", str(self.port), "--ctx", str(args.ctx),
               "--kv-disk-dir", str(kv_dir), "--kv-disk-space-mb", str(args.space_mb), "--log-level", "warning"]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=open(log, "w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"hearth serve exited with {self.proc.returncode}:\n{log.read_text()}")
            try:
                if self.request("GET", "/health")[0] == 200:
                    return
            except OSError:
                time.sleep(0.2)
        raise SystemExit("hearth serve was not ready in 300 s")

    def request(self, method: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        conn.request(method, path, json.dumps(body) if body is not None else None,
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, r.read()

    def ttft(self, ids: list[int]) -> tuple[float, int]:
        """(seconds to the first streamed token, prompt tokens served from the cache)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        body = {"prompt": ids, "max_tokens": 2, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}}
        t0 = time.perf_counter()
        conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        first, cached = None, -1
        for line in r:
            if not line.startswith(b"data: {"):
                continue
            event = json.loads(line[6:])
            if first is None and event.get("choices"):
                first = time.perf_counter() - t0
            if event.get("usage"):
                cached = event["usage"]["prompt_tokens_details"]["cached_tokens"]
        return first, cached

    def metric(self, name: str) -> float:
        for line in self.request("GET", "/metrics")[1].decode().splitlines():
            if line.startswith(name):
                return float(line.rsplit(" ", 1)[1])
        return float("nan")

    def wait_for_writes(self, timeout: float = 120) -> None:
        """Until the disk tier's written-blocks counter has stopped moving for a second."""
        deadline, last = time.monotonic() + timeout, -1.0
        while time.monotonic() < deadline:
            now = self.metric("hearth:kv_disk_blocks_written_total")
            if now == last:
                return
            last = now
            time.sleep(1.0)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=120)


def prompts(server: Server, n: int, tokens: int) -> list[list[int]]:
    text = TEXT.read_text()
    step = len(text) // (n + 1)
    out = []
    for i in range(n + 1):  # the first is the warm-up
        ids = json.loads(server.request("POST", "/tokenize", {"prompt": text[i * step:i * step + tokens * 6]})[1])
        out.append(ids["tokens"][:tokens])
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--tokens", type=int, default=4000)
    p.add_argument("--ctx", type=int, default=8192)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--space-mb", type=int, default=4096)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--keep", action="store_true", help="keep the disk directory")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hearth-kv-disk-"))
    kv_dir = work / "kv"
    try:
        cold_server = Server(args, kv_dir, work / "cold.log")
        warmup, *runs = prompts(cold_server, args.repeats, args.tokens)
        cold_server.ttft(warmup[:512])
        cold = []
        for ids in runs:  # each measured with no block write of an earlier prompt still running
            cold_server.wait_for_writes()
            cold.append(cold_server.ttft(ids))
        cold_server.stop()  # shutdown finishes the queued block writes
        files = list((kv_dir / "blocks").iterdir())
        on_disk = sum(f.stat().st_size for f in files)
        warm_server = Server(args, kv_dir, work / "warm.log")
        warm_server.ttft(warmup[:512][::-1])  # warm the kernels without touching the measured prompts
        warm = [warm_server.ttft(ids) for ids in runs]
        read = warm_server.metric("hearth:kv_disk_blocks_read_total")
        corrupt = warm_server.metric("hearth:kv_disk_corrupt_files_total")
        warm_server.stop()
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    c, w = statistics.median(t for t, _ in cold), statistics.median(t for t, _ in warm)
    per_prompt = on_disk / max(1, len(files)) * read / max(1, args.repeats)
    print(json.dumps({
        "model": args.model, "prompt_tokens": args.tokens, "ctx": args.ctx, "repeats": args.repeats,
        "cold_ttft_s": [round(t, 3) for t, _ in cold], "warm_ttft_s": [round(t, 3) for t, _ in warm],
        "cached_tokens_cold": [n for _, n in cold], "cached_tokens_warm": [n for _, n in warm],
        "disk_files": len(files), "disk_mb": round(on_disk / 2**20, 1), "blocks_read": read, "corrupt": corrupt,
    }, indent=1))
    print(f"\nTTFT, {args.tokens}-token prompt: cold prefill {c:.3f} s, after restart from disk {w:.3f} s "
          f"-> {c / w:.1f}x faster (target >= 10x); {per_prompt / 2**20:.0f} MB read per prompt "
          f"({per_prompt / w / 1e9:.2f} GB/s over the whole TTFT)")


if __name__ == "__main__":
    main()
