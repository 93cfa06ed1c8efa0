"""Side-by-side CPU benchmark: hearth vs llama.cpp (llama-cpp-python) on the same GGUF files.

    /work/main/.venv/bin/python benchmarks/bench_vs_llamacpp.py [model.gguf ...] [--threads 2]

For each engine, in its own subprocess (so peak RSS is per engine): load time, prefill tok/s on a
512-token prompt, single-stream decode tok/s over 128 tokens, peak RSS, GB/s of weights streamed
during decode and % of a streaming-read roofline measured in the same run; medians of --repeats.
The engines' repeats are interleaved (workers stay alive), so noise from other processes on shared
cores lands on both alike.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from hearth import openmp

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_MODELS = ["smollm2-135m", "gemma3-270m"]
WORKERS = {"llama.cpp": "bench_worker_llamacpp.py", "hearth": "bench_worker_hearth.py"}


# ---------------------------------------------------------------- what the model makes decode read
def model_facts(path: str) -> dict:
    """Bytes a decode step streams: every tensor except the embedding table, which is read one row
    per token, unless it is tied and doubles as the output head (then it is read in full)."""
    from hearth.loader.gguf_loader import GGUFFile  # one pass over the header, no per-token objects

    g = GGUFFile(path)
    sizes = {name: int(t.data.nbytes) for name, t in g.tensors.items()}
    tied = "output.weight" not in sizes
    weight_bytes = sum(n for name, n in sizes.items() if name != "token_embd.weight" or tied)
    return {"weight_bytes": weight_bytes, "tied_head": tied,
            "n_vocab": len(g.field_array("tokenizer.ggml.tokens")),
            "bos_id": int(g.get("tokenizer.ggml.bos_token_id", -1)),
            "add_bos": bool(g.get("tokenizer.ggml.add_bos_token", True)),
            "arch": g.arch}


def prompt_ids(facts: dict, n: int, seed: int) -> list[int]:
    """Seeded ordinary-vocabulary ids: speed does not depend on the text, and a fresh prompt per run
    keeps any prefix cache out of the measurement."""
    rng = random.Random(seed)
    hi = min(facts["n_vocab"], 30000)
    ids = [rng.randrange(1000, hi) for _ in range(n)]
    if facts["add_bos"] and facts["bos_id"] >= 0:
        ids[0] = facts["bos_id"]
    return ids


# ---------------------------------------------------------------- roofline
def read_bandwidth(threads: int, nbytes: int) -> float:
    """Streaming-read GB/s as `hearth plan` measures it: the best of a reduction over a buffer and,
    where hearth's native kernels load, their read pass in 1-16 interleaved runs (one read per byte)."""
    import torch

    from hearth.memory.bandwidth import native_peaks, read_bandwidth as measure

    torch.set_num_threads(threads)
    return measure(torch, nbytes, native_peaks()) / 1e9


def int8_peak(threads: int) -> float | None:
    """GOP/s of the int8 dot products hearth's kernels at this tier are built on (None: torch tier)."""
    import torch

    from hearth.memory.bandwidth import int8_dot_ops, native_peaks

    torch.set_num_threads(threads)
    lib = native_peaks()
    return int8_dot_ops(lib) / 1e9 if lib is not None else None


def copy_bandwidth(threads: int, nbytes: int, reps: int = 5) -> float:
    """GB/s moved by a large tensor copy (bytes read + bytes written)."""
    import torch

    torch.set_num_threads(threads)
    src = torch.ones(nbytes // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - t0)
    return 2 * src.numel() * 4 / statistics.median(times) / 1e9


def prefill_flops(path: str, prompt_tokens: int) -> float:
    """FLOPs per prompt token of a prompt this long, as `hearth plan` counts them."""
    from hearth.loader.gguf_loader import GGUFFile
    from hearth.memory.model_input import from_gguf
    from hearth.memory.roofline import prefill_flops as flops

    m = from_gguf(GGUFFile(Path(path)))
    return flops(m.shape, m.tensors, prompt_tokens)


# ---------------------------------------------------------------- running the engines
def warn_if_busy() -> None:
    """Other processes on the same cores distort every number here (spinning thread pools suffer most)."""
    load1 = os.getloadavg()[0]
    if load1 > 0.5:
        print(f"  warning: 1-min load average is {load1:.1f}; other processes are using the CPU",
              file=sys.stderr, flush=True)


class WorkerFailed(RuntimeError):
    pass


class Worker:
    """One engine in its own process (so its peak RSS is its own), driven over bench_proc's line
    protocol; it stays alive so the parent can interleave the engines' repeats."""

    def __init__(self, engine: str, python: str, job: dict, timeout: float):
        self.engine = engine
        env = dict(openmp.peer_env(), OMP_NUM_THREADS=str(job["threads"]), PYTHONPATH=str(REPO))  # each engine its own OpenMP default
        try:
            self.proc = subprocess.Popen([python, str(HERE / WORKERS[engine])], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)
        except OSError as e:
            raise WorkerFailed(f"cannot start {python}: {e}") from None
        self.timeout, self.timed_out = timeout, False
        self.timer = threading.Timer(timeout, self._expire)  # a hung engine must not hang the run
        self.timer.daemon = True
        self.timer.start()
        self.ready = self.request(job)

    def request(self, msg: dict | None) -> dict:
        """Send one message (None: end of input) and return the worker's next JSON answer."""
        try:
            if msg is None:
                self.proc.stdin.close()
            else:
                self.proc.stdin.write(json.dumps(msg) + "\n")
                self.proc.stdin.flush()
        except OSError:
            pass  # the worker died; reading below reports it
        for line in self.proc.stdout:
            if line.startswith('{"event"'):
                return json.loads(line)
        self.timer.cancel()
        code = self.proc.wait()
        why = f"killed after --timeout {self.timeout:g} s" if self.timed_out else f"exited with code {code}"
        raise WorkerFailed(f"worker {why} (its stderr is above)")

    def _expire(self) -> None:
        self.timed_out = True
        self.proc.kill()

    def finish(self) -> dict:
        done = self.request(None)
        self.proc.wait()
        self.timer.cancel()
        return done

    def kill(self) -> None:
        self.timer.cancel()
        self.proc.kill()
        self.proc.wait()


def summarize(ready: dict, runs: list[dict], done: dict, weight_bytes: int, bw: dict, flops_per_token: float) -> dict:
    prefill = [r["prefill_tok_s"] for r in runs]
    decode = [r["decode_tok_s"] for r in runs]
    gbs = weight_bytes * statistics.median(decode) / 1e9
    gops = flops_per_token * statistics.median(prefill) / 1e9
    return {"engine": done["engine"], "version": done["version"], "load_s": ready["load_s"],
            "peak_rss_mb": done["peak_rss_mb"], "prefill_tok_s": prefill, "decode_tok_s": decode,
            "prefill_med": statistics.median(prefill), "decode_med": statistics.median(decode),
            "prefill_gops": gops, "decode_gbs": gbs, "roofline_pct": 100 * gbs / bw["read_gbs"],
            **({"compute_pct": 100 * gops / bw["int8_gops"]} if bw.get("int8_gops") else {})}


# ---------------------------------------------------------------- report
def rows(prompt_tokens: int, decode_tokens: int) -> list[tuple[str, str, str]]:
    return [("load time (s)", "load_s", "{:.2f}"),
            (f"prefill tok/s ({prompt_tokens} tok)", "prefill_med", "{:.1f}"),
            ("prefill GOP/s", "prefill_gops", "{:.0f}"), ("% of int8 dot peak", "compute_pct", "{:.1f}"),
            (f"decode tok/s ({decode_tokens} tok)", "decode_med", "{:.1f}"),
            ("peak RSS (MB)", "peak_rss_mb", "{:.0f}"),
            ("decode weight GB/s", "decode_gbs", "{:.2f}"), ("% of read roofline", "roofline_pct", "{:.1f}")]


def print_table(title: str, results: dict[str, dict], table_rows: list[tuple[str, str, str]]) -> None:
    engines = list(results)
    print(f"\n{title}")
    print(f"  {'':26}" + "".join(f"{e:>14}" for e in engines) + f"{'hearth/llama.cpp':>18}")
    for label, key, fmt in table_rows:
        cells = [fmt.format(r[key]) if key in r else "n/a" for r in results.values()]
        a, b = results.get("hearth", {}).get(key), results.get("llama.cpp", {}).get(key)
        ratio = f"{a / b:.2f}x" if a is not None and b else "n/a"
        print(f"  {label:26}" + "".join(f"{c:>14}" for c in cells) + f"{ratio:>18}")
    for r in results.values():
        if "error" in r:
            print(f"  {r['engine']}: {r['error']}")


# ---------------------------------------------------------------- main
def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=DEFAULT_MODELS,
                    help="GGUF files or catalog names, fetched into $HEARTH_HOME (default: smollm2-135m gemma3-270m)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--engines", nargs="+", default=list(WORKERS), choices=list(WORKERS))
    ap.add_argument("--llamacpp-python", default="/work/llamacpp-venv/bin/python")
    ap.add_argument("--hearth-python", default=str(REPO / ".venv" / "bin" / "python"))
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per engine per model (then it is killed)")
    ap.add_argument("--json", help="also write all results to this file")
    return ap.parse_args()


def start_workers(engines: list[str], pythons: dict, job: dict, timeout: float,
                  errors: dict) -> dict[str, Worker]:
    """Start (and load) one engine at a time, so load times are not measured against each other."""
    workers = {}
    for engine in engines:
        warn_if_busy()
        print(f"  starting {engine} ...", file=sys.stderr, flush=True)
        try:
            workers[engine] = Worker(engine, pythons[engine], job, timeout)
        except WorkerFailed as e:
            errors[engine] = {"engine": engine, "error": str(e)}
    return workers


def interleaved_runs(workers: dict[str, Worker], requests: list[dict], errors: dict) -> dict[str, list]:
    """Repeat i of every engine runs back to back on the same prompts, so load from other processes
    on shared cores lands on both engines alike."""
    runs = {engine: [] for engine in workers}
    for i, req in enumerate(requests):
        warn_if_busy()
        print(f"  repeat {i + 1}/{len(requests)}", file=sys.stderr, flush=True)
        for engine in list(workers):
            try:
                runs[engine].append(workers[engine].request(req))
            except WorkerFailed as e:
                errors[engine] = {"engine": engine, "error": str(e)}
                workers.pop(engine).kill()
    return runs


def bench_model(path: str, args: argparse.Namespace, bw: dict) -> dict:
    facts = model_facts(path)
    n = args.prompt_tokens
    # the warm-up prompt has the measured length: each engine has its buffers for such a batch before
    # the first timed one (llama.cpp reserves them with its context, hearth grows its scratch on use)
    job = {"model": path, "threads": args.threads, "decode_tokens": args.decode_tokens,
           "warmup": prompt_ids(facts, n, seed=0)}
    requests = [{"prefill_ids": prompt_ids(facts, n, seed=2 * i + 1),
                 "decode_ids": prompt_ids(facts, n, seed=2 * i + 2)} for i in range(args.repeats)]
    pythons = {"llama.cpp": args.llamacpp_python, "hearth": args.hearth_python}
    engines = [e for e in WORKERS if e in args.engines]  # llama.cpp column first
    errors: dict[str, dict] = {}
    workers = start_workers(engines, pythons, job, args.timeout, errors)
    runs = interleaved_runs(workers, requests, errors)
    results = {}
    for engine, worker in workers.items():
        try:
            done = worker.finish()
        except WorkerFailed as e:
            errors[engine] = {"engine": engine, "error": str(e)}
            continue
        results[engine] = summarize(worker.ready, runs[engine], done, facts["weight_bytes"], bw,
                                    prefill_flops(path, n))
    results = {e: results.get(e) or errors[e] for e in engines}
    title = (f"{Path(path).name}  [{facts['arch']}, {args.threads} threads, "
             f"{facts['weight_bytes'] / 1e6:.1f} MB weights read per decode token"
             f"{', tied head' if facts['tied_head'] else ''}]")
    print_table(title, results, rows(args.prompt_tokens, args.decode_tokens))
    return {"model": path, "facts": facts, "results": results}


def main() -> None:
    args = parse_args()
    print(f"measuring memory bandwidth with {args.threads} threads ...", file=sys.stderr, flush=True)
    bw = {"read_gbs": read_bandwidth(args.threads, 1 << 30),
          "copy_gbs": copy_bandwidth(args.threads, 1 << 29), "int8_gops": int8_peak(args.threads)}
    print(f"streaming read {bw['read_gbs']:.1f} GB/s (1 GiB, `hearth plan`'s measure: the roofline below), "
          f"copy {bw['copy_gbs']:.1f} GB/s (read+write)" + (
              f", int8 dot peak {bw['int8_gops']:.0f} GOP/s (the kernels' instruction at this tier; prefill's "
              "ceiling)" if bw["int8_gops"] else ""))
    print("note: weights under ~300 MB can stay in L3 across tokens, so decode may exceed the DRAM roofline")
    report = {"threads": args.threads, "repeats": args.repeats, "bandwidth": bw, "models": []}
    from hearth.loader.resolve import resolve_model

    args.models = [str(resolve_model(m)) for m in args.models]
    for i, path in enumerate(args.models):
        print(f"\n== [{i + 1}/{len(args.models)}] {path}", file=sys.stderr, flush=True)
        report["models"].append(bench_model(path, args, bw))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
