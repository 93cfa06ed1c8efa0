"""The MoE block on the CPU backend: load time of a many-expert tiny GGUF, and the routed experts' time
on a Qwen3-30B-A3B-sized layer (hidden 2048, expert width 768, 128 experts, 8 used), the op-by-op path
(one native linear per expert, hearth.layers.experts) against the native one (hearth.backends.cpu_experts),
in the same process, alternating, medians of rounds.

    PYTHONPATH=. python benchmarks/bench_moe.py load --layers 48 --experts 128
    PYTHONPATH=. python benchmarks/bench_moe.py block --qtype Q8_0 --rows 1 64 --threads 1"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from gguf import GGMLQuantizationType as Q

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hearth.backends import select  # noqa: E402
from hearth.loader.gguf_loader import GGUFFile, GGUFTensor  # noqa: E402
from hearth.models.registry import load_model  # noqa: E402


def load(args) -> None:
    from tests.gguf_factory import write_tiny_gguf
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "moe.gguf"
        write_tiny_gguf(path, "qwen3moe", qtype="Q8_0", layers=args.layers, experts=args.experts, experts_used=8,
                        expert_ffn=32)
        for _ in range(args.repeats):
            t = time.perf_counter()
            load_model(GGUFFile(path), select("cpu"))
            print(f"load {args.layers} layers x {args.experts} experts: {time.perf_counter() - t:.2f} s", flush=True)


def stacked(name: str, qtype: Q, e: int, n: int, k: int, rng) -> GGUFTensor:
    """A random stacked expert tensor [e, n, k] in qtype's blocks (random codes, finite scales: the tests'
    random_tensor, one expert's blocks copied to each: the bytes read per expert count, not their values)."""
    from tests.layers.test_quant import random_tensor
    one = random_tensor(qtype, n, k, rng).data
    return GGUFTensor(name, qtype, (e, n, k), np.ascontiguousarray(np.broadcast_to(one, (e, *one.shape))))


def gemvs_alone(gate, up, qtype, k, hidden, inter, rng):
    """x -> down(gate_up(x)) over k experts' bytes as one dense MLP (gate | up: the first k experts' rows;
    down: random [hidden, k * inter]): what the GEMVs alone cost, no routing, no per-expert calls."""
    from hearth.kernels import native
    from hearth.layers.quant import as_bytes
    from tests.layers.test_quant import random_tensor
    rows = lambda t: (as_bytes(t.data, t.qtype)[:k * inter], int(t.qtype))  # noqa: E731
    gu = native.NativeMatmul([rows(gate), rows(up)], hidden)
    d = random_tensor(qtype, hidden, k * inter, rng)
    dn = native.NativeMatmul([(as_bytes(d.data, d.qtype), int(qtype))], k * inter)
    return lambda x: dn(gu(x)[:, :k * inter])


def block(args) -> None:
    from hearth.backends.cpu import CpuBackend
    from hearth.kernels import tiers
    from hearth.layers.experts import Experts
    torch.set_num_threads(args.threads)
    rng, qtype = np.random.default_rng(0), Q[args.qtype]
    e, k, hidden, inter = args.experts, args.used, args.hidden, args.inter
    gate, up = (stacked(f"{w}", qtype, e, inter, hidden, rng) for w in ("gate", "up"))
    down = stacked("down", qtype, e, hidden, inter, rng)
    backend = CpuBackend(tiers.selected())
    paths = {"op by op": Experts(backend.linear, [gate, up], down, "silu"),
             "native": backend.experts([gate, up], down, "silu")}
    floor = gemvs_alone(gate, up, qtype, k, hidden, inter, rng)
    g = torch.Generator().manual_seed(0)
    for rows in args.rows:
        h = torch.randn(rows, hidden, generator=g)
        weights, ids = torch.softmax(torch.randn(rows, e, generator=g), -1).topk(k, dim=-1)
        times = {name: [] for name in paths}
        for name, f in paths.items():
            f(h, weights, ids)  # warm: the experts' weights paged in
        t = time.perf_counter()
        paths["native"](h, weights, ids)
        iters = args.iters or max(1, int(0.2 / (time.perf_counter() - t)))  # ~0.2 s a path a round
        for _ in range(args.rounds):  # alternating: the machine's load drifts alike for both
            for name, f in paths.items():
                t = time.perf_counter()
                for _ in range(iters):
                    f(h, weights, ids)
                times[name].append((time.perf_counter() - t) / iters * 1e3)
        router = torch.randn(e, hidden, generator=g)  # the routing both paths share (MoE.route's ops)
        t = time.perf_counter()
        for _ in range(iters * args.rounds):
            torch.softmax(h @ router.T, dim=-1).topk(k, dim=-1)[0].div(1.0)
        route_ms = (time.perf_counter() - t) / iters / args.rounds * 1e3
        print(f"  routing (f32 router GEMV, softmax, top-k, renorm; both paths): {route_ms:.3f} ms")
        if rows == 1:  # the same bytes through two plain GEMVs in the same rounds' conditions
            t = time.perf_counter()
            for _ in range(iters * args.rounds):
                floor(h)
            ms = (time.perf_counter() - t) / iters / args.rounds * 1e3
            print(f"  the k experts' bytes as two plain GEMVs: {ms:.3f} ms")
        med = {name: statistics.median(v) for name, v in times.items()}
        low = {name: min(v) for name, v in times.items()}
        ratios = sorted(a / b for a, b in zip(times["op by op"], times["native"]))  # per round
        print(f"{args.qtype} rows {rows} ({args.rounds} rounds x {iters}): "
              + ", ".join(f"{n} median {med[n]:.3f} ms, min {low[n]:.3f}" for n in paths)
              + f"; op by op / native per round {ratios[0]:.2f}-{ratios[-1]:.2f}x, median "
              f"{statistics.median(ratios):.2f}x, of the minima {low['op by op'] / low['native']:.2f}x", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    a = sub.add_parser("load")
    a.add_argument("--layers", type=int, default=48)
    a.add_argument("--experts", type=int, default=128)
    a.add_argument("--repeats", type=int, default=2)
    b = sub.add_parser("block")
    b.add_argument("--qtype", default="Q8_0")
    b.add_argument("--rows", type=int, nargs="+", default=[1, 64])
    b.add_argument("--threads", type=int, default=1)
    b.add_argument("--experts", type=int, default=128)
    b.add_argument("--used", type=int, default=8)
    b.add_argument("--hidden", type=int, default=2048)
    b.add_argument("--inter", type=int, default=768)
    b.add_argument("--rounds", type=int, default=9)
    b.add_argument("--iters", type=int, default=0, help="calls per round (0: ~0.2 s worth)")
    args = ap.parse_args()
    {"load": load, "block": block}[args.what](args)


if __name__ == "__main__":
    main()
