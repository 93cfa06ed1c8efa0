"""LoRA decode against the base model in one process: a random llama.cpp-style adapter (rank --rank on q, k,
v, o, gate, up, down of every layer) is written next to a temporary dir, the model loaded once with it, and
generate calls alternate between the modes, so a shared machine's load hits them alike:

    base      the request's adapter scale 0: the base model's fused decode
    lora      scale 1 (--scale; the fused stack with the adapter terms where the library has them)
    lora-ops  the same with the fused LoRA stack declined: the layers op by op (the path before it)

Per mode: the median wall and process-CPU time of EngineCore.step over the decode steps (each call's first
two left out), and their ratios to base's (tok/s of lora / tok/s of base). OpenMP waits as hearth sets it
(hearth.openmp: a short spin) unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set; on a loaded machine the CPU
time is the steadier figure. Usage (checkout root, hearth's venv):

    PYTHONPATH=. python benchmarks/bench_lora_decode.py smollm2-135m --rank 16 --rounds 6
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import gguf
import numpy as np

from hearth import LLM, SamplingParams
from hearth.engine.engine_core import EngineCore
from hearth.loader.gguf_loader import GGUFFile
from hearth.loader.resolve import resolve_model

MATRICES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def write_adapter(path: Path, base: GGUFFile, rank: int, alpha: float = 16.0, seed: int = 0) -> None:
    """A random adapter (convert_lora_to_gguf.py's keys) on every layer's MATRICES; B small (0.01), so the
    greedy text stays the model's kind of text."""
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), base.arch)
    w.add_type(gguf.GGUFType.ADAPTER)
    w.add_string(gguf.Keys.Adapter.TYPE, "lora")
    w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)
    names = [n for n in base.tensors
             if n.startswith("blk.") and n.endswith(".weight") and n.rsplit(".", 2)[-2] in MATRICES]
    for name in names:
        out, k = base.tensors[name].shape
        w.add_tensor(name + ".lora_a", (rng.standard_normal((rank, k)) / np.sqrt(k)).astype(np.float32))
        w.add_tensor(name + ".lora_b", (rng.standard_normal((out, rank)) * 0.01).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--scale", type=float, default=1.0, help="the adapter's scale in the lora modes")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5, help="generate calls per mode (after one warm-up round)")
    ap.add_argument("--tokens", type=int, default=48, help="new tokens per call")
    ap.add_argument("--prompt-tokens", type=int, default=32)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    path = resolve_model(args.model)
    write_adapter(tmp / "lora.gguf", GGUFFile(path), args.rank)
    llm = LLM(str(path), threads=args.threads, progress=False, enable_prefix_caching=False,
              lora=[(str(tmp / "lora.gguf"), 0.0)])
    steps: list[tuple[float, float]] = []
    step = EngineCore.step

    def timed(self, *a, **k):
        t0, c0 = time.perf_counter(), time.process_time()
        out = step(self, *a, **k)
        steps.append((time.perf_counter() - t0, time.process_time() - c0))
        return out
    EngineCore.step = timed
    try:
        from hearth.kernels.fused_lora import FusedLoraStack
        fused = FusedLoraStack.decode
        modes = ["base", "lora", "lora-ops"]
    except ImportError:  # a checkout before it: the op-by-op path is "lora"
        FusedLoraStack, modes = None, ["base", "lora"]
    got, texts = {m: [] for m in modes}, {m: [] for m in modes}
    rng = random.Random(0)
    for r in range(args.rounds + 1):
        ids = [rng.randrange(1000, 30000) for _ in range(args.prompt_tokens)]
        for mode in (modes if r % 2 == 0 else modes[::-1]):
            if FusedLoraStack is not None:
                FusedLoraStack.decode = fused if mode != "lora-ops" else (lambda *a, **k: 0)
            steps.clear()
            out = llm.generate([{"prompt_token_ids": ids}],
                               SamplingParams(temperature=0, max_tokens=args.tokens, ignore_eos=True,
                                              lora={0: 0.0 if mode == "base" else args.scale}))
            texts[mode].append(out[0].outputs[0].token_ids)
            if r > 0:
                got[mode] += steps[2:]
    load = open("/proc/loadavg").read().split()[:3]
    print(f"{args.model}, rank {args.rank} on {', '.join(MATRICES)}, {args.threads} thread(s), {args.rounds} x "
          f"{args.tokens} tokens a mode, load average {' '.join(load)}")
    med = {m: [statistics.median(t[c] for t in got[m]) for c in (0, 1)] for m in modes}
    for m in modes:
        (w, c), (bw, bc) = med[m], med["base"]
        print(f"{m:9s} step median wall {w * 1e3:7.3f} ms ({1 / w:6.1f} tok/s, base/this {bw / w:.3f}), "
              f"CPU {c * 1e3:7.3f} ms (base/this {bc / c:.3f})")
    if "lora-ops" in modes:
        same = sum(a == b for a, b in zip(texts["lora"], texts["lora-ops"]))
        print(f"lora and lora-ops greedy tokens equal in {same} of {len(texts['lora'])} calls")
    print(f"lora differs from base in {sum(a != b for a, b in zip(texts['lora'], texts['base']))} of "
          f"{len(texts['base'])} calls")


if __name__ == "__main__":
    main()
