"""Continuous-batching benchmark: hearth vs llama.cpp at 1, 4, 16 and 64 concurrent sequences.

    /work/main/.venv/bin/python benchmarks/bench_batching.py [model.gguf] [--concurrency 1,4,16,64]

For each N, every engine gets a fresh worker process (so its peak RSS is that N's own) that is given
N distinct text prompts at once and runs them to max_tokens greedy tokens each (EOS ignored) with
its own continuous batching: hearth's scheduler; llama.cpp's low-level batched API driven the way
llama-server's parallel slots drive it. Both report a timestamp per engine step; from those this
script computes, identically for both: TTFT of the last request (when every sequence is decoding),
aggregate decode tok/s after that point, end-to-end tok/s (all generated tokens / wall time), ms per
decode step, weight GB/s (weight bytes x decode steps / decode time) and % of a read roofline.
Medians of --repeats, the engines' repeats interleaved so load from other processes hits both alike.
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

import bench_vs_llamacpp as bvl
from bench_proc import emit, log, peak_rss_mb

from hearth import openmp

DEFAULT_MODEL = "smollm2-135m"  # a catalog name or a .gguf path
WORKERS = {"llama.cpp": "bench_batching_worker_llamacpp.py", "hearth": "bench_batching_worker_hearth.py"}

# Prompts are real sentences in a seeded order behind a per-sequence header: ordinary text (so greedy
# continuations are comparable across engines) that differs within its first dozen tokens, so no
# prefix cache can share a block between sequences, repeats or the warmup.
SENTENCES = [
    "The river bends twice before it reaches the old mill, where the water slows and turns green.",
    "Every morning the baker opens the shutters at six and sets the first loaves on the window sill.",
    "A small committee met on Tuesday to decide how the new library wing should be heated in winter.",
    "The train to the coast was late again, so most passengers bought coffee and read the paper.",
    "In the north of the valley the farmers grow barley, potatoes and a little rye for the mill.",
    "She wrote the function twice: once to get it right and once more to make it fast enough.",
    "The museum keeps its oldest maps in a cool room with no windows and a very heavy door.",
    "Our neighbour repairs bicycles in his garage and never charges more than the price of the parts.",
    "When the storm passed, the children ran down to the beach to look for shells and driftwood.",
    "The report lists three causes for the delay: missing parts, a strike at the port and bad weather.",
    "Most of the town's streets were laid out in the eighteenth century along the line of the old wall.",
    "He keeps a notebook of every bird he has seen, with the date, the place and the weather.",
    "The recipe calls for two eggs, a cup of milk, a cup of flour and a pinch of salt.",
    "At the end of the meeting everyone agreed to meet again in a month to review the numbers.",
    "The lighthouse has been automatic since 1987, but the keeper's cottage is still kept painted.",
    "Students who finish the exercise early may start reading the next chapter on their own.",
    "The orchestra rehearsed the second movement until the strings and the horns finally agreed.",
    "A good map shows not only the roads but also the hills, the rivers and the small footpaths.",
    "The company moved its offices to a converted warehouse near the station last spring.",
    "On clear nights you can see the lights of three villages from the top of the hill.",
    "The garden was planted with herbs in the front and vegetables along the back fence.",
    "Each chapter of the manual ends with a short list of questions and a worked example.",
    "The ferry crosses the bay four times a day in summer and twice a day in winter.",
    "Nobody remembered who had planted the walnut tree, but everyone agreed it was very old.",
]


def text_prompt(tokenizer, tag: str, i: int, n_tokens: int) -> list[int]:
    """Prompt i of a set: exactly n_tokens ids of a header and seeded-order sentences."""
    rng = random.Random(f"{tag}/{i}")
    pool, text, ids = list(SENTENCES), f"Field notes, set {tag}, page {i + 1}.\n\n", []
    while len(ids) < n_tokens:
        rng.shuffle(pool)
        text += " ".join(pool) + "\n\n"
        ids = tokenizer.encode(text, parse_special=False)
    return ids[:n_tokens]


# ---------------------------------------------------------------- metrics (both engines alike)
def kv_token_bytes(path: str) -> int:
    """Bytes of f16 K and V one token keeps across all layers (both engines' default KV format)."""
    from hearth.loader.gguf_loader import GGUFFile

    g = GGUFFile(path)
    a = g.arch
    heads = g.get(f"{a}.attention.head_count")
    kv_heads = g.get(f"{a}.attention.head_count_kv", heads)
    k_dim = g.get(f"{a}.attention.key_length") or g.get(f"{a}.embedding_length") // heads
    v_dim = g.get(f"{a}.attention.value_length") or k_dim
    per_layer = [kv_heads] * g.get(f"{a}.block_count") if isinstance(kv_heads, int) else list(kv_heads)
    return sum(per_layer) * (k_dim + v_dim) * 2


def decode_context(run: dict, prompt_len: int, max_tokens: int, decode_tokens: int) -> int | None:
    """Key/value positions the decode phase attends over, summed over its tokens: output k of a
    sequence attends prompt_len + k positions. Assumes every sequence samples once per step from its
    first token on (no preemption); None when the step log says otherwise."""
    index = {t: j for j, (t, _) in enumerate(run["steps"])}
    firsts = [index.get(t) for t in run["first_token_s"]]
    if None in firsts:
        return None
    last = max(firsts)
    spans = [range(last - f + 1, max_tokens) for f in firsts]  # output indices made after `last`
    if sum(len(r) for r in spans) != decode_tokens:
        return None
    return sum(prompt_len * len(r) + sum(r) for r in spans)


def phase_metrics(run: dict, weight_bytes: int = 0, kv_bytes: int = 0, prompt_len: int = 0) -> dict:
    """run: {"first_token_s": per sequence, "steps": [(t, tokens sampled)], "outputs"}; times are
    seconds since the requests were added. Decode = the steps after the last first token."""
    steps = run["steps"]
    t_end, ttft_last = steps[-1][0], max(run["first_token_s"])
    decode = [n for t, n in steps if t > ttft_last]
    decode_s = max(t_end - ttft_last, 1e-9)
    tokens = sum(len(o) for o in run["outputs"])
    m = {"tokens": tokens, "total_s": t_end, "ttft_last_s": ttft_last, "decode_steps": len(decode),
         "decode_tokens": sum(decode), "decode_s": decode_s, "e2e_tok_s": tokens / t_end,
         "decode_tok_s": sum(decode) / decode_s, "decode_ms_step": 1e3 * decode_s / max(len(decode), 1),
         "decode_gbs": weight_bytes * len(decode) / decode_s / 1e9}
    ctx = decode_context(run, prompt_len, len(run["outputs"][0]), sum(decode)) if kv_bytes else None
    if ctx is not None:
        m["kv_gbs"] = kv_bytes * ctx / decode_s / 1e9
        m["kv_mb_step"] = kv_bytes * ctx / max(len(decode), 1) / 1e6
    return m


def agreement(a: list[list[int]], b: list[list[int]]) -> list[int]:
    """Per sequence: how many leading tokens two engines' greedy outputs share."""
    def common(x: list[int], y: list[int]) -> int:
        return next((k for k, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
    return [common(x, y) for x, y in zip(a, b)]


# ---------------------------------------------------------------- worker side
def serve_worker(engine: str, load, run, version: str) -> None:
    """stdin line 1: the job (model, threads, n_seqs, ctx_per_seq, max_batched_tokens, max_tokens,
    warmup prompts); answered {"event": "ready", "load_s"} after load and one warmup run. Each further
    line {"prompts"} is one repeat, answered {"event": "run", first_token_s, steps, outputs}. At EOF:
    {"event": "done", "peak_rss_mb", "version"}. run(state, prompts, max_tokens) -> dict."""
    job = json.loads(sys.stdin.readline())
    n = job["n_seqs"]
    t0 = time.perf_counter()
    state = load(job)
    load_s = time.perf_counter() - t0
    log(engine, f"N={n}: loaded in {load_s:.2f} s; warming up")
    run(state, job["warmup"], job["warmup_tokens"])
    emit({"event": "ready", "load_s": load_s})
    for i, line in enumerate(sys.stdin):
        result = run(state, json.loads(line)["prompts"], job["max_tokens"])
        m = phase_metrics(result)
        log(engine, f"N={n} repeat {i + 1}: decode {m['decode_tok_s']:.1f} tok/s, end-to-end "
                    f"{m['e2e_tok_s']:.1f} tok/s, last TTFT {m['ttft_last_s']:.2f} s, {m['tokens']} tokens")
        emit({"event": "run", **result})
    emit({"event": "done", "engine": engine, "version": version, "peak_rss_mb": peak_rss_mb()})


# ---------------------------------------------------------------- parent side
class BatchWorker(bvl.Worker):
    """bench_vs_llamacpp's worker handle (line protocol, timeout, kill), on this benchmark's scripts."""

    def __init__(self, engine: str, python: str, job: dict, timeout: float):
        self.engine = engine
        env = dict(openmp.peer_env(), OMP_NUM_THREADS=str(job["threads"]), PYTHONPATH=str(bvl.REPO))
        try:
            self.proc = subprocess.Popen([python, str(bvl.HERE / WORKERS[engine])], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True, env=env, cwd=bvl.REPO)
        except OSError as e:
            raise bvl.WorkerFailed(f"cannot start {python}: {e}") from None
        self.timeout, self.timed_out = timeout, False
        self.timer = threading.Timer(timeout, self._expire)
        self.timer.daemon = True
        self.timer.start()
        self.ready = self.request(job)


MAX_LOAD = [0.0]  # highest 1-min load average seen, printed with the results


def check_load() -> None:
    MAX_LOAD[0] = max(MAX_LOAD[0], os.getloadavg()[0])
    bvl.warn_if_busy()


def run_repeats(workers: dict, requests: list[dict], max_tokens: int, errors: dict) -> dict[str, list]:
    """Repeat i of every engine back to back on the same prompts; a worker whose output is short
    (or that dies) is dropped with its error."""
    runs = {engine: [] for engine in workers}
    for i, req in enumerate(requests):
        check_load()
        print(f"  repeat {i + 1}/{len(requests)}", file=sys.stderr, flush=True)
        for engine in list(workers):
            try:
                res = workers[engine].request(req)
                bad = [len(o) for o in res["outputs"] if len(o) != max_tokens]
                if bad or len(res["outputs"]) != len(req["prompts"]):
                    raise bvl.WorkerFailed(f"{len(res['outputs'])} outputs, lengths {bad[:4]} "
                                           f"instead of {max_tokens}")
                runs[engine].append(res)
            except bvl.WorkerFailed as e:
                errors[engine] = {"engine": engine, "error": str(e)}
                workers.pop(engine).kill()
    return runs


def summarize(ready: dict, runs: list[dict], done: dict, sizes: dict, roofline_gbs: float) -> dict:
    per_run = [phase_metrics(r, sizes["weight_bytes"], sizes["kv_token_bytes"], sizes["prompt_len"])
               for r in runs]
    med = {k: statistics.median(m[k] for m in per_run) for k in per_run[0] if all(k in m for m in per_run)}
    moved = med["decode_gbs"] + med.get("kv_gbs", 0.0)
    return {"engine": done["engine"], "version": done["version"], "load_s": ready["load_s"],
            "peak_rss_mb": done["peak_rss_mb"], **med, "roofline_pct": 100 * moved / roofline_gbs,
            "preemptions": sum(r.get("preemptions", 0) for r in runs), "runs": per_run,
            "outputs": [r["outputs"] for r in runs],
            "step_logs": [{"first_token_s": r["first_token_s"], "steps": r["steps"]} for r in runs]}


ROWS = [("decode tok/s (aggregate)", "decode_tok_s", "{:.1f}"), ("end-to-end tok/s", "e2e_tok_s", "{:.1f}"),
        ("TTFT of last request (s)", "ttft_last_s", "{:.2f}"), ("decode ms/step", "decode_ms_step", "{:.1f}"),
        ("decode weight GB/s", "decode_gbs", "{:.2f}"), ("decode KV MB/step", "kv_mb_step", "{:.1f}"),
        ("decode KV GB/s", "kv_gbs", "{:.2f}"), ("% of read roofline (w+KV)", "roofline_pct", "{:.1f}"),
        ("peak RSS (MB)", "peak_rss_mb", "{:.0f}"), ("load time (s)", "load_s", "{:.2f}")]


def print_agreement(runs: dict[str, list], max_tokens: int) -> dict | None:
    if not ({"hearth", "llama.cpp"} <= set(runs) and all(runs.values())):
        return None
    a, b = runs["hearth"], runs["llama.cpp"]
    common = [c for ra, rb in zip(a, b) for c in agreement(ra["outputs"], rb["outputs"])]
    stats = {"mean": statistics.mean(common), "min": min(common),
             "identical": sum(c == max_tokens for c in common), "sequences": len(common)}
    print(f"  greedy agreement hearth vs llama.cpp: common prefix mean {stats['mean']:.1f} / {max_tokens} "
          f"tokens, min {stats['min']}; {stats['identical']}/{stats['sequences']} sequences identical")
    return stats


def bench_n(n: int, args: argparse.Namespace, facts: dict, tokenizer, bw: dict) -> dict:
    p, new = args.prompt_tokens, args.max_tokens
    job = {"model": args.model, "threads": args.threads, "n_seqs": n, "max_tokens": new,
           "ctx_per_seq": -(-(p + new) // 256) * 256, "max_batched_tokens": args.max_batched_tokens,
           "llamacpp_flash_attn": args.llamacpp_flash_attn, "warmup_tokens": 4,
           "warmup": [text_prompt(tokenizer, "warmup", i, min(p, 32)) for i in range(n)]}
    requests = [{"prompts": [text_prompt(tokenizer, f"r{r + 1}", i, p) for i in range(n)]}
                for r in range(args.repeats)]
    sizes = {"weight_bytes": facts["weight_bytes"], "kv_token_bytes": facts["kv_token_bytes"],
             "prompt_len": p}
    pythons = {"llama.cpp": args.llamacpp_python, "hearth": args.hearth_python}
    engines = [e for e in WORKERS if e in args.engines]  # llama.cpp column first
    errors: dict[str, dict] = {}
    workers = {}
    for engine in engines:  # one at a time, so the loads do not overlap
        check_load()
        print(f"  starting {engine} (N={n}) ...", file=sys.stderr, flush=True)
        try:
            workers[engine] = BatchWorker(engine, pythons[engine], job, args.timeout)
        except bvl.WorkerFailed as e:
            errors[engine] = {"engine": engine, "error": str(e)}
    runs = run_repeats(workers, requests, new, errors)
    results = {}
    for engine, worker in workers.items():
        try:
            results[engine] = summarize(worker.ready, runs[engine], worker.finish(), sizes, bw["read_gbs"])
        except bvl.WorkerFailed as e:
            errors[engine] = {"engine": engine, "error": str(e)}
    results = {e: results.get(e) or errors[e] for e in engines}
    title = (f"N = {n} concurrent sequences  [{p}-token prompts, {new} new tokens each, "
             f"medians of {args.repeats}]")
    bvl.print_table(title, results, ROWS)
    for r in results.values():
        if r.get("preemptions"):
            print(f"  note: {r['engine']} preempted {r['preemptions']} requests (KV cache too small)")
    agree = print_agreement({e: runs[e] for e in workers if e in results and "error" not in results[e]}, new)
    return {"n_seqs": n, "job": {k: v for k, v in job.items() if k != "warmup"}, "results": results,
            "agreement": agree}


def print_summary(report: dict) -> None:
    print(f"\nsummary ({Path(report['model']).name}, {report['threads']} threads; "
          f"ratio = hearth/llama.cpp, > 1 is better)")
    head = f"{'llama.cpp':>11}{'hearth':>9}{'ratio':>8}"
    print(f"  {'':>4}{'aggregate decode tok/s':>28}   |{'end-to-end tok/s':>28}")
    print(f"  {'N':>4}{head}   |{head}")
    for row in report["runs"]:
        res = row["results"]
        cells = [_summary_cells(res.get("llama.cpp", {}).get(k), res.get("hearth", {}).get(k))
                 for k in ("decode_tok_s", "e2e_tok_s")]
        print(f"  {row['n_seqs']:>4}{cells[0]}   |{cells[1]}")


def _summary_cells(ref: float | None, ours: float | None) -> str:
    def num(x: float | None, w: int) -> str:
        return f"{x:>{w}.1f}" if x else f"{'n/a':>{w}}"
    ratio = f"{ours / ref:.2f}x" if ours and ref else "n/a"
    return num(ref, 11) + num(ours, 9) + f"{ratio:>8}"


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default=DEFAULT_MODEL)
    ap.add_argument("--concurrency", default="1,4,16,64", help="comma-separated numbers of sequences")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=128, help="new tokens per sequence")
    ap.add_argument("--quick", action="store_true", help="smoke test: 64-token prompts, 32 new tokens")
    ap.add_argument("--max-batched-tokens", type=int, default=2048,
                    help="tokens per engine step: hearth's max_num_batched_tokens = llama.cpp's n_batch")
    ap.add_argument("--llamacpp-flash-attn", choices=["auto", "on", "off"], default="auto",
                    help="llama.cpp flash attention (auto = llama-server's default)")
    ap.add_argument("--engines", nargs="+", default=list(WORKERS), choices=list(WORKERS))
    ap.add_argument("--llamacpp-python", default="/work/llamacpp-venv/bin/python")
    ap.add_argument("--hearth-python", default=str(bvl.REPO / ".venv" / "bin" / "python"))
    ap.add_argument("--timeout", type=float, default=3600,
                    help="seconds per engine per N (then it is killed)")
    ap.add_argument("--json", help="also write all results to this file")
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    if args.quick:
        args.prompt_tokens, args.max_tokens = 64, 32
    args.concurrency = [int(x) for x in args.concurrency.split(",")]
    return args


def main() -> None:
    args = parse_args()
    from hearth.loader.gguf_loader import GGUFFile
    from hearth.loader.resolve import resolve_model
    from hearth.loader.tokenizer import Tokenizer

    args.model = str(resolve_model(args.model))  # the workers take the file

    t0 = time.perf_counter()
    check_load()
    print(f"measuring memory bandwidth with {args.threads} threads ...", file=sys.stderr, flush=True)
    bw = {"read_gbs": bvl.read_bandwidth(args.threads, 1 << 30)}
    facts = bvl.model_facts(args.model)
    facts["kv_token_bytes"] = kv_token_bytes(args.model)
    tokenizer = Tokenizer.from_gguf(GGUFFile(args.model))
    print(f"{Path(args.model).name}  [{facts['arch']}, {args.threads} threads, "
          f"{facts['weight_bytes'] / 1e6:.1f} MB weights read per decode step"
          f"{', tied head' if facts['tied_head'] else ''}, {facts['kv_token_bytes'] / 1e3:.1f} kB f16 K+V "
          f"per token of context; streaming read {bw['read_gbs']:.1f} GB/s "
          f"(the roofline); step budget {args.max_batched_tokens} tokens]")
    report = {"model": args.model, "threads": args.threads, "repeats": args.repeats, "bandwidth": bw,
              "facts": facts, "runs": []}
    for n in args.concurrency:
        print(f"\n== N = {n}", file=sys.stderr, flush=True)
        report["runs"].append(bench_n(n, args, facts, tokenizer, bw))
    print_summary(report)
    check_load()
    report["max_load1"], report["elapsed_s"] = MAX_LOAD[0], time.perf_counter() - t0
    print(f"\nhighest 1-min load average seen: {MAX_LOAD[0]:.1f} (above ~0.5, other processes shared the "
          f"cores: trust ratios more than absolute numbers); took {report['elapsed_s'] / 60:.1f} min")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
