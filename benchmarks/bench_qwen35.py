"""qwen35 (Gated DeltaNet) speed: hearth with torch's DeltaNet mixer, hearth with the native one
(csrc/delta_net.h) and llama.cpp, on one GGUF (benchmarks/qwen35_shapes.py writes Qwen3.5-0.8B's shapes).

    /work/main/.venv/bin/python benchmarks/bench_qwen35.py MODEL.gguf --llamacpp-python PY [--threads 1 2]

PY: a python that imports llama_cpp over a libllama.so with qwen35 (e.g. the vendored sources' build,
LLAMA_CPP_LIB_PATH=/work/llama-mtmd-build/bin). Per thread count, --repeats rounds, each engine once a round
(interleaved, so load from other processes lands on all alike): prefill of a --prompt-tokens prompt, then
--decode-tokens greedy steps. Each figure is given in wall time and in the process's CPU time (every thread's),
which a loaded machine inflates less; medians of the rounds. hearth's two mixers share one loaded model (the
layers' `mix` swapped), llama.cpp runs in a worker process of its own."""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

if "--worker" not in sys.argv:  # the llama.cpp worker keeps libgomp's defaults: no hearth import there
    from hearth import openmp  # noqa: E402  (before torch: hearth's OpenMP spin setting, hearth/openmp.py)


def cpu_seconds() -> float:
    """CPU time of this process's threads so far (user + system)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(fn) -> tuple[float, float]:
    """(wall s, CPU s) of fn()."""
    w, c = time.perf_counter(), cpu_seconds()
    fn()
    return time.perf_counter() - w, cpu_seconds() - c


def ids(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1000, 30000) for _ in range(n)]


# ---------------------------------------------------------------- llama.cpp (worker process)
def llamacpp_worker(model: str, threads: int) -> None:
    """Line protocol: a JSON job {prompt, decode, seed} in, {prefill: [wall, cpu], decode: [wall, cpu]} out."""
    import llama_cpp
    import numpy as np
    from llama_cpp import Llama

    llm = Llama(model, n_ctx=2048, n_batch=512, n_threads=threads, n_threads_batch=threads, verbose=False)

    def argmax() -> int:
        ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
        return int(np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).argmax())

    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        llm.reset()
        prefill = timed(lambda: llm.eval(ids(job["prompt"], job["seed"])))
        tok = [argmax()]

        def decode():
            for _ in range(job["decode"]):
                llm.eval([tok[0]])
                tok[0] = argmax()
        print(json.dumps({"prefill": prefill, "decode": timed(decode)}), flush=True)


class LlamaCpp:
    def __init__(self, python: str, model: str, threads: int):
        env = dict(openmp.peer_env(), OMP_NUM_THREADS=str(threads))  # llama.cpp keeps its own OpenMP default
        self.proc = subprocess.Popen([python, __file__, model, "--worker", str(threads)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env)
        assert json.loads(self.proc.stdout.readline())["ready"]

    def run(self, prompt: int, decode: int, seed: int) -> dict:
        self.proc.stdin.write(json.dumps({"prompt": prompt, "decode": decode, "seed": seed}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


# ---------------------------------------------------------------- hearth (this process)
class Hearth:
    """One loaded model; mode 'torch' or 'native' picks the DeltaNet layers' mixer."""

    def __init__(self, model: str, threads: int):
        from hearth import LLM

        self.llm = LLM(model, threads=threads)
        self.layers = [m for m in self.llm_model().modules() if hasattr(m, "mix")]
        self.native = self.layers[0].mix

    def llm_model(self):
        return next(v for v in _walk(self.llm) if hasattr(v, "layers") and hasattr(v, "backend"))

    def run(self, mode: str, prompt: int, decode: int, seed: int) -> dict:
        from hearth import SamplingParams
        from hearth.layers.delta_mixer import delta_mix_torch

        for layer in self.layers:
            layer.mix = delta_mix_torch if mode == "torch" else self.native

        def gen(n: int, s: int):
            params = SamplingParams(temperature=0, max_tokens=n, ignore_eos=True)
            out = self.llm.generate([{"prompt_token_ids": ids(prompt, s)}], params)
            assert len(out[0].outputs[0].token_ids) == n and not out[0].num_cached_tokens

        first = timed(lambda: gen(1, seed))
        both = timed(lambda: gen(1 + decode, seed + 1))  # same length, a fresh prompt: no prefix-cache hit
        return {"prefill": first, "decode": [both[0] - first[0], both[1] - first[1]]}


def _walk(obj, depth: int = 0, seen=None):
    """Objects reachable through attributes (finds the torch model inside the LLM without naming its path)."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth > 4:
        return
    seen.add(id(obj))
    yield obj
    for v in list(getattr(obj, "__dict__", {}).values()):
        if not isinstance(v, (int, float, str, bytes, list, dict, tuple)) and v is not None:
            yield from _walk(v, depth + 1, seen)


# ---------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--llamacpp-python", default="")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.worker:
        return llamacpp_worker(args.model, args.worker)
    import torch

    results = {}
    for t in args.threads:
        torch.set_num_threads(t)
        engines = {"hearth torch": None, "hearth native": None}
        h = Hearth(args.model, t)
        peer = LlamaCpp(args.llamacpp_python, args.model, t) if args.llamacpp_python else None
        h.run("native", 32, 4, 999)  # warm: pages of the file, kernels built
        runs: dict[str, list[dict]] = {k: [] for k in (*engines, *(["llama.cpp"] if peer else []))}
        if peer:
            peer.run(32, 4, 999)
        for rep in range(args.repeats):
            seed = 1000 * rep + 10 * t
            runs["hearth torch"].append(h.run("torch", args.prompt_tokens, args.decode_tokens, seed))
            runs["hearth native"].append(h.run("native", args.prompt_tokens, args.decode_tokens, seed + 2))
            if peer:
                runs["llama.cpp"].append(peer.run(args.prompt_tokens, args.decode_tokens, seed + 4))
        if peer:
            peer.close()
        results[t] = {k: summary(v, args) for k, v in runs.items()}
        report(t, results[t], os.getloadavg())
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


def summary(runs: list[dict], args) -> dict:
    """Median tokens/s by wall and by CPU time, and the spread (min, max) of the wall figure."""
    out = {}
    for what, n in (("prefill", args.prompt_tokens), ("decode", args.decode_tokens)):
        wall = [n / r[what][0] for r in runs]
        cpu = [n / r[what][1] for r in runs]
        out[what] = {"wall": statistics.median(wall), "cpu": statistics.median(cpu), "wall_range": (min(wall), max(wall))}
    return out


def report(threads: int, res: dict, load: tuple) -> None:
    print(f"\n{threads} thread(s), load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    print(f"{'engine':<15} {'prefill tok/s wall (cpu)':>26} {'decode tok/s wall (cpu)':>26}")
    base = res["hearth torch"]
    for name, r in res.items():
        cells = [f"{r[w]['wall']:7.1f} ({r[w]['cpu']:6.1f})" for w in ("prefill", "decode")]
        print(f"{name:<15} {cells[0]:>26} {cells[1]:>26}")
    if "llama.cpp" in res:
        for w in ("prefill", "decode"):
            nat, tor, peer = res["hearth native"][w], base[w], res["llama.cpp"][w]
            print(f"  {w}: native/torch {nat['wall'] / tor['wall']:.2f}x wall, {nat['cpu'] / tor['cpu']:.2f}x cpu; "
                  f"native/llama.cpp {nat['wall'] / peer['wall']:.2f} wall, {nat['cpu'] / peer['cpu']:.2f} cpu")


if __name__ == "__main__":
    main()
