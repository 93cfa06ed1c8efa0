"""qwen35 (Gated DeltaNet) speed: hearth before (torch's DeltaNet mixer, gated attention op by op in torch) and
after (the native mixer, csrc/delta_net.h; the attention on the native layer's steps) and llama.cpp, on one GGUF
(benchmarks/qwen35_shapes.py writes Qwen3.5-0.8B's shapes).

    /work/main/.venv/bin/python benchmarks/bench_qwen35.py MODEL.gguf --llamacpp-python PY [--threads 1 2]

PY: a python that imports llama_cpp over a libllama.so with qwen35 (e.g. the vendored sources' build,
LLAMA_CPP_LIB_PATH=/work/llama-mtmd-build/bin). Per thread count, --repeats rounds, each engine once a round
(interleaved, so load from other processes lands on all alike): prefill of a --prompt-tokens prompt, then
--decode-tokens greedy steps after a --context prompt. Each figure is given in wall time and in the process's CPU time (every thread's),
which a loaded machine inflates less; medians of the rounds. hearth's before and after share one loaded model
(the layers' `mix` and `ops` swapped), llama.cpp runs in a worker process of its own."""

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
    """Line protocol: a JSON job {prompt, decode, context, seed} in, {prefill: [wall, cpu], decode: [wall, cpu]} out."""
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
        llm.reset()
        llm.eval(ids(job["context"], job["seed"] + 1))  # untimed: decode continues a short prompt, as hearth's
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

    def run(self, prompt: int, decode: int, context: int, seed: int) -> dict:
        self.proc.stdin.write(json.dumps({"prompt": prompt, "decode": decode, "context": context, "seed": seed}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


# ---------------------------------------------------------------- hearth (this process)
class Hearth:
    """One loaded model, run as before or after this work: 'before' puts back torch's DeltaNet mixer and the
    gated attention layers' op-by-op torch steps; 'after' is how the CPU backend builds them now."""

    def __init__(self, model: str, threads: int):
        from hearth import LLM

        self.llm = LLM(model, threads=threads)
        self.layers = list(self.llm.model.layers)
        self.after = [(getattr(m, "mix", None), m.ops) for m in self.layers]

    def use(self, mode: str) -> None:
        from hearth.backends.base import TORCH_OPS
        from hearth.layers.delta_mixer import delta_mix_torch

        for layer, (mix, ops) in zip(self.layers, self.after):
            if mix is not None:  # a DeltaNet layer
                layer.mix = delta_mix_torch if mode == "before" else mix
            else:  # a gated attention layer
                layer.ops = TORCH_OPS if mode == "before" else ops

    def run(self, mode: str, prompt: int, decode: int, context: int, seed: int) -> dict:
        """prefill: one generate(max_tokens=1) of `prompt` ids; decode: t(1 + decode) - t(1) of `context` ids
        (a short prompt: the prefill's noise stays out of the difference). Fresh ids each: no prefix-cache hit."""
        from hearth import SamplingParams

        self.use(mode)

        def gen(n: int, length: int, s: int):
            params = SamplingParams(temperature=0, max_tokens=n, ignore_eos=True)
            out = self.llm.generate([{"prompt_token_ids": ids(length, s)}], params)
            assert len(out[0].outputs[0].token_ids) == n and not out[0].num_cached_tokens

        prefill = timed(lambda: gen(1, prompt, seed))
        first = timed(lambda: gen(1, context, seed + 1))
        both = timed(lambda: gen(1 + decode, context, seed + 2))
        return {"prefill": prefill, "decode": [both[0] - first[0], both[1] - first[1]]}


# ---------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--llamacpp-python", default="")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--context", type=int, default=16, help="the prompt decode continues")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.worker:
        return llamacpp_worker(args.model, args.worker)
    import torch

    results = {}
    job = (args.prompt_tokens, args.decode_tokens, args.context)
    for t in args.threads:
        torch.set_num_threads(t)
        h = Hearth(args.model, t)
        peer = LlamaCpp(args.llamacpp_python, args.model, t) if args.llamacpp_python else None
        h.run("after", 32, 4, 8, 999)  # warm: pages of the file, kernels built
        runs: dict[str, list[dict]] = {"hearth before": [], "hearth after": [], **({"llama.cpp": []} if peer else {})}
        if peer:
            peer.run(32, 4, 8, 999)
        for rep in range(args.repeats):
            seed = 1000 * rep + 10 * t
            runs["hearth before"].append(h.run("before", *job, seed))
            runs["hearth after"].append(h.run("after", *job, seed + 3))
            if peer:
                runs["llama.cpp"].append(peer.run(*job, seed + 6))
        if peer:
            peer.close()
        results[t] = {k: summary(v, args) for k, v in runs.items()}
        report(t, results[t], os.getloadavg())
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


def summary(runs: list[dict], args) -> dict:
    """Median tokens/s by wall and by CPU time, and their spread (min, max)."""
    out = {}
    for what, n in (("prefill", args.prompt_tokens), ("decode", args.decode_tokens)):
        wall = [n / r[what][0] for r in runs]
        cpu = [n / r[what][1] for r in runs]
        out[what] = {"wall": statistics.median(wall), "cpu": statistics.median(cpu),
                     "wall_range": (min(wall), max(wall)), "cpu_range": (min(cpu), max(cpu))}
    return out


def report(threads: int, res: dict, load: tuple) -> None:
    print(f"\n{threads} thread(s), load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    print(f"{'engine':<15} {'prefill tok/s wall (cpu)':>26} {'decode tok/s wall (cpu)':>26}")
    for name, r in res.items():
        cells = [f"{r[w]['wall']:7.1f} ({r[w]['cpu']:6.1f})" for w in ("prefill", "decode")]
        print(f"{name:<15} {cells[0]:>26} {cells[1]:>26}")
    for w in ("prefill", "decode"):
        aft, bef = res["hearth after"][w], res["hearth before"][w]
        line = f"  {w}: after/before {aft['wall'] / bef['wall']:.2f}x wall, {aft['cpu'] / bef['cpu']:.2f}x cpu"
        if "llama.cpp" in res:
            peer = res["llama.cpp"][w]
            line += (f"; after/llama.cpp {aft['wall'] / peer['wall']:.2f}x wall, {aft['cpu'] / peer['cpu']:.2f}x cpu; "
                     f"before/llama.cpp {bef['wall'] / peer['wall']:.2f}x wall, {bef['cpu'] / peer['cpu']:.2f}x cpu")
        print(line)
    print("  cpu ranges: " + "; ".join(f"{n} {w} {r[w]['cpu_range'][0]:.1f}-{r[w]['cpu_range'][1]:.1f}"
                                       for n, r in res.items() for w in ("prefill", "decode")))


if __name__ == "__main__":
    main()
