"""`hearth cluster serve` measured (issue 23 point 6), in one command:

1. routing: prefix-aware vs round-robin on 2 replicas x 1 thread, `hearth bench --url` with the
   `shared-prefix` workload (32 conversations over 8 ~850-token system prompts, growing a turn at a
   time) at each concurrency, each replica's KV cache held to --kv-fractions of the workload's
   working set (its distinct blocks), one server per fraction, so that one replica cannot hold
   every conversation's prefix; the hit rate is the replicas' prefix-cache counters from
   /metrics (prompt tokens served from cache / prompt tokens, summed over replicas), with TTFT
   p50/p99 and output tokens/s from the bench;
2. the same workload on one `hearth serve --threads 2` with both replicas' KV blocks (2 x 1 vs 1 x 2);
3. the front end's cost: one `hearth cluster serve --replicas 1` and one `hearth serve --threads 1`
   up together, the same one-token request sent to each in turn (--pairs times, the order swapped
   every pair), TTFT p50 of each and the p50 of the per-pair difference (hearth serve's HTTP server
   and engine share one interpreter lock, the cluster's do not: bench_cluster_frontend.py measures
   the front end against the replica called directly instead).

    .venv/bin/python benchmarks/bench_cluster.py [--levels 8,32] [--requests 96]
                                                 [--kv-fractions 0.25,0.5] [--only simulate,prefix,round-robin,serve,overhead]

Each server is started fresh, measured and stopped in turn; each level sends its own seed's prompts
(new system prompts and conversations: nothing cached by an earlier level helps). On a shared
machine single runs differ by ~10-20% in time: compare ratios within one run."""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2

PY = sys.executable
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's hearth, wherever the script is run from

from hearth.bench.http_client import HttpClient  # noqa: E402
from hearth.bench.spec.servers import free_port  # noqa: E402
from hearth.bench.workloads import BenchRequest  # noqa: E402


def start(argv: list[str], port: int, log: Path) -> subprocess.Popen:
    proc = subprocess.Popen([PY, "-m", "hearth", *argv, "--port", str(port)], stdout=log.open("w"), cwd=ROOT,
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


def stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def cache_counts(port: int) -> tuple[float, float]:
    """(prompt tokens looked up, prompt tokens found) in the prefix cache, summed over replicas."""
    queries = hits = 0.0
    for line in httpx2.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text.splitlines():
        if line.startswith("hearth:prefix_cache_queries_total"):
            queries += float(line.rsplit(" ", 1)[1])
        elif line.startswith("hearth:prefix_cache_hits_total"):
            hits += float(line.rsplit(" ", 1)[1])
    return queries, hits


def measure(label: str, argv: list[str], args, out: Path, blocks: int) -> list[dict]:
    port = free_port()
    label_file = f"{label.replace(' ', '-')}-{blocks}"
    proc = start(argv, port, out / f"{label_file}.log")
    rows = []
    try:
        for seed, c in enumerate(args.levels):
            q0, h0 = cache_counts(port)
            res = out / f"{label_file}-c{c}"
            subprocess.run([PY, "-m", "hearth", "bench", "--url", f"http://127.0.0.1:{port}", "--workload",
                            "shared-prefix", "--concurrency", str(c), "--requests", str(args.requests),
                            "--max-tokens", str(args.max_tokens), "--seed", str(seed), "--warmup", "1",
                            "--output", str(res)], check=True, stdout=subprocess.DEVNULL, cwd=ROOT,
                           stderr=(out / f"{label_file}-c{c}.log").open("w"))
            q1, h1 = cache_counts(port)
            lv = json.loads((res / "results.json").read_text())["levels"][0]
            rows.append({"server": label, "blocks": blocks, "clients": c, "hit_rate": (h1 - h0) / max(q1 - q0, 1),
                         "prompt_tokens": q1 - q0, "ttft_p50": lv["ttft_s"]["p50"], "ttft_p99": lv["ttft_s"]["p99"],
                         "output_tok_s": lv["output_tok_s"], "failed": lv["failed"],
                         "loadavg": Path("/proc/loadavg").read_text().split()[0]})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        stop(proc)
    return rows


def overhead(args, out: Path) -> dict:
    """TTFT of one short request through the cluster's front end (1 replica) and straight to a
    `hearth serve` of the same engine settings, interleaved; after the first, the prompt is a
    prefix-cache hit on both, so the engines' work is one token and the difference is the hop."""
    engine = ["--max-model-len", "2048", "--num-kv-blocks", str(args.kv_blocks)]
    ports = {"cluster": free_port(), "serve": free_port()}
    procs = {"cluster": start(["cluster", "serve", args.model, "--replicas", "1", *engine], ports["cluster"],
                              out / "overhead-cluster.log")}
    try:
        procs["serve"] = start(["serve", args.model, "--threads", "1", *engine], ports["serve"],
                               out / "overhead-serve.log")
        clients = {k: HttpClient(f"http://127.0.0.1:{p}") for k, p in ports.items()}
        req = BenchRequest(0, [{"role": "user", "content": "Name one colour."}], 1)
        ttft: dict[str, list[float]] = {k: [] for k in clients}
        for i in range(args.pairs + 2):  # the first two pairs warm up
            order = list(clients) if i % 2 else list(clients)[::-1]
            got = {k: clients[k]._send(req, 1) for k in order}
            if any(r.error or r.ttft is None for r in got.values()):
                raise SystemExit(f"overhead request failed: {[r.error for r in got.values()]}")
            if i >= 2:
                for k, r in got.items():
                    ttft[k].append(r.ttft)
    finally:
        for p in procs.values():
            stop(p)
    diffs = [a - b for a, b in zip(ttft["cluster"], ttft["serve"])]
    row = {"pairs": args.pairs, "cluster_p50_ms": 1e3 * statistics.median(ttft["cluster"]),
           "serve_p50_ms": 1e3 * statistics.median(ttft["serve"]), "diff_p50_ms": 1e3 * statistics.median(diffs),
           "loadavg": Path("/proc/loadavg").read_text().split()[0]}
    print(json.dumps(row), flush=True)
    return row


def workload_prompts(args) -> list[list[int]]:
    """The shared-prefix workload's prompts of one level, in this model's tokens, as the server sees them."""
    from hearth.api.chat_template import ChatTemplate
    from hearth.bench.workloads import build_workload
    from hearth.loader.gguf_loader import GGUFFile
    from hearth.loader.resolve import resolve_model
    from hearth.loader.tokenizer import Tokenizer

    g = GGUFFile(resolve_model(args.model))
    tok = Tokenizer.from_gguf(g)
    template = ChatTemplate(tok.chat_template, tok.bos_token, tok.eos_token, g.arch)
    bos = tok.bos_token if tok.add_bos and tok.bos_token else None
    prompts = []
    for r in build_workload("shared-prefix", requests=args.requests).levels[0].requests:
        text = template.render(r.messages)
        prompts.append(tok.encode(text[len(bos):] if bos and text.startswith(bos) else text,
                                  add_special_tokens=True, parse_special=True))
    return prompts


def working_set_blocks(prompts: list[list[int]]) -> int:
    """Distinct full blocks of 16 tokens over the level's prompts: every system prompt and every
    conversation's history as its last turn left it, what all caches together would need to miss
    only each block's first sight."""
    from hearth.kvstore.block_hash import chain_hashes, root_hash

    root = root_hash(b"simulation")
    return len({h for ids in prompts for h in chain_hashes(root, ids, 16)})


def simulate(args, prompts: list[list[int]], working: int) -> list[dict]:
    """Routing alone, no model and no clock: the workload's prompts (this model's tokens) sent one
    at a time through each router to replicas that each keep the last `blocks` prompt blocks (LRU,
    as the engine's free-block queue evicts), for several cache sizes: where the hit rate ratio
    comes from, without the in-flight requests that take blocks from the cache in a real run."""
    from collections import OrderedDict

    from hearth.cluster.router import ReplicaLoad, make_router
    from hearth.kvstore.block_hash import chain_hashes, root_hash

    root, idle = root_hash(b"simulation"), [ReplicaLoad(True, 0, 1 << 30)] * args.replicas
    rows = []
    for fraction in SIM_FRACTIONS:
        blocks = round(fraction * working)
        row = {"blocks": blocks, "fraction": fraction}
        for routing in ("prefix", "round-robin"):
            router = make_router(routing, args.replicas, root=root, block_size=16)
            caches = [OrderedDict() for _ in range(args.replicas)]
            hits = 0
            for ids in prompts:
                cache = caches[router.pick(ids, idle)]
                hashes = chain_hashes(root, ids, 16)
                hits += 16 * next((i for i, h in enumerate(hashes) if h not in cache), len(hashes))
                for h in hashes:
                    cache[h] = None
                    cache.move_to_end(h)
                while len(cache) > blocks:
                    cache.popitem(last=False)
            row[routing] = hits / sum(map(len, prompts))
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


SIM_FRACTIONS = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1, 2)
"""Cache sizes the simulation sweeps, per replica, as a fraction of the workload's working set."""


def servers(args, blocks: int) -> dict[str, list[str]]:
    """Each server's command line with `blocks` KV blocks per replica (hearth serve: replicas x that)."""
    engine = ["--max-model-len", "2048"]
    cluster = ["cluster", "serve", args.model, "--replicas", str(args.replicas), "--threads-per-replica", "1",
               "--num-kv-blocks", str(blocks), *engine, *(["--address", args.address] if args.address else [])]
    prefix = {f"prefix {lf:g}": [*cluster, "--routing", "prefix", "--load-factor", f"{lf:g}"]
              for lf in args.load_factors}
    return {**prefix, "round-robin": [*cluster, "--routing", "round-robin"],
            "serve": ["serve", args.model, "--threads", str(args.replicas),
                      "--num-kv-blocks", str(blocks * args.replicas), *engine]}


def print_tables(rows: list[dict], over: dict | None, sim: list[dict] | None) -> None:
    if sim:
        print("| KV blocks per replica (of the working set) | prefix hit rate | round-robin hit rate | ratio |")
        print("|---|---|---|---|")
        for r in sim:
            print(f"| {r['blocks']} ({r['fraction']:g}) | {r['prefix']:.0%} | {r['round-robin']:.0%} | "
                  f"{r['prefix'] / max(r['round-robin'], 1e-9):.2f}x |")
    def name(server: str) -> str:
        if server == "serve":
            return "`hearth serve --threads 2`"
        routing, *lf = server.split()
        return f"cluster 2 x 1, `{routing}`" + (f", load factor {lf[0]}" if lf else "")

    print("| server | KV blocks a replica | clients | prefix-cache hit rate | TTFT p50 | TTFT p99 | output tok/s | load avg |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {name(r['server'])} | {r['blocks']} | {r['clients']} | {r['hit_rate']:.0%} | {r['ttft_p50']:.2f} s | "
              f"{r['ttft_p99']:.2f} s | {r['output_tok_s']:.1f} | {r['loadavg']} |")
    by = {(r["server"], r["blocks"], r["clients"]): r for r in rows}
    for (server, blocks, c), p in by.items():
        rr = by.get(("round-robin", blocks, c))
        if server.startswith("prefix") and rr:
            ratio = p["hit_rate"] / max(rr["hit_rate"], 1e-9)
            print(f"{blocks} blocks, {c} clients, {server}: hit rate / round-robin's = {ratio:.2f}x, "
                  f"TTFT p50 / round-robin's = {p['ttft_p50'] / rr['ttft_p50']:.2f}")
    if over:
        print(f"front end: TTFT p50 {over['cluster_p50_ms']:.1f} ms through the cluster vs "
              f"{over['serve_p50_ms']:.1f} ms from hearth serve; per-pair difference p50 "
              f"{over['diff_p50_ms']:+.1f} ms ({over['pairs']} pairs)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--levels", default="8,32", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--requests", type=int, default=96,
                   help="requests per level (32 = one turn of every conversation; 96: each grows to its third turn)")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--address", help="a Ray cluster to join (e.g. one started with more --num-cpus than this "
                                     "machine has, to measure hit rates on more replicas than cores)")
    p.add_argument("--kv-fractions", default="0.25,0.5", type=lambda s: [float(x) for x in s.split(",")],
                   help="KV blocks per replica as fractions of the workload's working set (its distinct "
                        "blocks), one server each (hearth serve gets replicas x that)")
    p.add_argument("--load-factors", default="1.25,1.5,2", type=lambda s: [float(x) for x in s.split(",")],
                   help="prefix routing's --load-factor, one cluster each")
    p.add_argument("--pairs", type=int, default=100, help="interleaved request pairs for the front end's cost")
    p.add_argument("--only", default="simulate,prefix,round-robin,serve,overhead", help="what to run")
    args = p.parse_args()
    out = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    print(f"load average at start: {Path('/proc/loadavg').read_text().strip()}", flush=True)
    wanted = args.only.split(",")
    prompts = workload_prompts(args)
    working = working_set_blocks(prompts)
    print(f"workload: {len(prompts)} prompts of {sum(map(len, prompts)):,} tokens, working set {working} blocks "
          f"of 16 tokens", flush=True)
    sim = simulate(args, prompts, working) if "simulate" in wanted else None
    capacities = [round(f * working) for f in args.kv_fractions]
    rows = []
    for blocks in capacities:
        table = servers(args, blocks)
        routed = [name for name in table if name.split()[0] in wanted and name != "serve"]
        rows += [r for name in routed for r in measure(name, table[name], args, out, blocks)]
    args.kv_blocks = capacities[0]
    over = overhead(args, out) if "overhead" in wanted else None
    if "serve" in wanted:  # last: one process of 2 threads is the slowest on a loaded machine
        rows += measure("serve", servers(args, capacities[0])["serve"], args, out, capacities[0])
    (out / "summary.json").write_text(json.dumps({"rows": rows, "overhead": over, "simulated": sim}, indent=1))
    print_tables(rows, over, sim)
    print(f"(raw results in {out})")


if __name__ == "__main__":
    main()
