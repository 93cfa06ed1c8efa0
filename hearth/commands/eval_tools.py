"""`hearth eval tools MODEL [--mode M] [--categories ...] [--limit N] [--out FILE]`: BFCL v4 tool
calling through a hearth server in this process (hearth.evals), and `hearth eval tools --compare
A.jsonl B.jsonl`: McNemar's exact test between two saved runs."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from hearth.commands.threads_flag import THREADS_HELP, thread_count
from hearth.config import DEFAULT_MODEL
from hearth.errors import HearthError

EVAL_CONTEXT = 16384  # the eval server's context unless --max-model-len: BFCL's multi-turn prompts fit


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", default=DEFAULT_MODEL,
                   help=f"catalog name, path to a .gguf file, or org/repo:file.gguf (default: {DEFAULT_MODEL}); "
                        "with --url the name sent")
    p.add_argument("--threads", type=thread_count, default=0, help=f"CPU threads; {THREADS_HELP} (default: 0)")
    p.add_argument("--mode", default="bare", help="the server's tool handling, sent as hearth.tool_guard: bare "
                   "(parse-only; `off` is a synonym, serve --tool-guard's name for it), grammar, guard "
                   "(default: %(default)s)")
    p.add_argument("--categories", default="", help="comma-separated BFCL categories (default: all of "
                   "simple_python, multiple, parallel, parallel_multiple, irrelevance, multi_turn_base)")
    p.add_argument("--limit", type=int, default=0, help="items per category, spread evenly over it: 0 (all) or "
                   "more (default: 0, all)")
    p.add_argument("--offset", type=int, default=0, metavar="K",
                   help="with --limit: shift each picked item K items on (below the spacing of the picks), for a "
                        "second sample disjoint from the first (default: %(default)s)")
    p.add_argument("--ids", default="", help="comma-separated item ids: only these (within --categories)")
    p.add_argument("--out", help="write one JSON line per item here (commit, model hash, mode, category, id, result, reason)")
    p.add_argument("--report", help="write the summary as JSON here")
    p.add_argument("--compare", nargs=2, metavar=("A.jsonl", "B.jsonl"), help="compare two --out files: McNemar's exact test")
    p.add_argument("--router", metavar="SMALL", help="route the model's single-turn tool calls through this small "
                   "model (hearth serve --router); rows record its decision, confidence and seconds")
    p.add_argument("--router-threshold", type=float, default=0.0, metavar="P",
                   help="the router's threshold; 0 (default) accepts every valid call: the rows a --sweep reads")
    p.add_argument("--router-tool-floor", type=float, default=0.0, metavar="F",
                   help="the router's tool floor (hearth serve --router-tool-floor); 0 (default) off, as a --sweep "
                        "run wants it")
    p.add_argument("--alone-out", metavar="FILE", help="with --router: run each item also with the router off "
                   "(the model alone, on the same server, in turns with the routed run so both share the load; "
                   "prefix caching off) and write those rows here")
    p.add_argument("--sweep", nargs=2, metavar=("ROUTER.jsonl", "MAIN.jsonl"),
                   help="the router's accuracy and median latency per threshold, computed from a --router run at "
                        "threshold 0 and a run of the main model alone")
    p.add_argument("--decline-below", type=float, default=None, metavar="P",
                   help="mode guard: decline a lazily triggered call whose name's first token had a raw probability "
                        "below P (sent as hearth.tool_guard_decline_below; 0: never; default: the server's)")
    p.add_argument("--parallel-hint", choices=("on", "off"), default=None,
                   help="mode guard: the system sentence asking for one call per thing asked (sent as "
                        "hearth.tool_guard_parallel_hint; default: the server's, off)")
    p.add_argument("--url", help="evaluate an OpenAI-compatible server already running at this http://HOST:PORT "
                   "(another hearth, llama-server --jinja) instead of loading MODEL; MODEL is the name sent")
    p.add_argument("--concurrency", type=int, default=1, metavar="N",
                   help="ask up to N items at once (the engine batches them; multi-turn items one at a time): "
                        "fewer CPU seconds a run, but each request's latency then includes the others' work, and "
                        "a near-tie between the model's top two tokens may resolve otherwise than alone, as a "
                        "batched step sums in another order (default: %(default)s, one item at a time)")
    p.add_argument("--max-model-len", type=int, default=None,
                   help=f"context for the eval's server (default: {EVAL_CONTEXT:,}, or the model's own when shorter)")


def main(args: argparse.Namespace) -> int:
    from hearth.evals import tool_report

    if args.compare:
        a, b = (tool_report.read_rows(f) for f in args.compare)
        print(tool_report.render_compare(tool_report.compare(a, b), *args.compare))
        return 0
    if args.sweep:
        from hearth.evals import router_sweep

        print(router_sweep.render(router_sweep.sweep(*(tool_report.read_rows(f) for f in args.sweep))))
        return 0
    rows, meta = run(args)
    summary = tool_report.summarize(rows)
    print(tool_report.render(summary, meta))
    if args.report:
        Path(args.report).write_text(json.dumps({"meta": meta, **summary}, indent=2) + "\n")
    return 0


def _categories(spec: str) -> list[str]:
    from hearth.evals.bfcl_data import CATEGORIES

    cats = [c.strip() for c in spec.split(",") if c.strip()] or list(CATEGORIES)
    bad = [c for c in cats if c not in CATEGORIES]
    if bad:
        raise HearthError(f"--categories: unknown {', '.join(bad)}; categories: {', '.join(CATEGORIES)}")
    return cats


def select(wheel: Path, categories: list[str], limit: int, ids: str, offset: int = 0) -> list:
    from hearth.evals.bfcl_data import load_category, sample

    wanted = {i.strip() for i in ids.split(",") if i.strip()}
    items = []
    for cat in categories:
        got = load_category(wheel, cat)
        items += [i for i in got if i.id in wanted] if wanted else sample(got, limit, offset)
    if wanted - {i.id for i in items}:
        raise HearthError(f"--ids: not found in {', '.join(categories)}: {', '.join(sorted(wanted - {i.id for i in items}))}")
    return items


def run(args: argparse.Namespace) -> tuple[list[dict], dict]:
    from hearth.evals.backends import Backends
    from hearth.evals.bfcl_data import MULTI_TURN, extract_backends, fetch_wheel
    from hearth.evals.chat_loop import ChatClient, check_mode
    from hearth.evals.server import RemoteServer
    from hearth.evals.tool_eval import Run, run_in_turns

    args.mode = check_mode(args.mode)  # before anything loads; rows and meta carry the mode's own name
    _check_flags(args)
    remote = RemoteServer(args.url, args.model) if args.url else None
    categories = _categories(args.categories)
    wheel = fetch_wheel()
    items = select(wheel, categories, args.limit, args.ids, args.offset)
    backends = Backends(extract_backends(wheel)) if any(i.category in MULTI_TURN for i in items) else None
    server, meta = (remote, _meta(args, None, None)) if remote is not None else _load(args)
    if args.decline_below is not None:
        meta["decline_below"] = args.decline_below
    hint = None if args.parallel_hint is None else args.parallel_hint == "on"
    if hint is not None:
        meta["parallel_hint"] = hint
    if args.concurrency > 1:  # latencies then include the other items' work
        meta["concurrency"] = args.concurrency
    runs = [Run(ChatClient(server.post, args.mode, decline_below=args.decline_below, parallel_hint=hint), meta)]
    if args.alone_out:  # the main model alone, on the same server: the router off per request
        alone = Run(ChatClient(server.post, args.mode, decline_below=args.decline_below, parallel_hint=hint),
                    {k: v for k, v in meta.items() if not k.startswith("router")}, " (alone)")
        alone.client.extensions["router"] = False
        runs.append(alone)
    t0 = time.perf_counter()

    def note(n: int, item, r: Run, row: dict) -> None:
        print(f"[{n}/{len(items)}] {item.id}{r.tag}: {row['result']} {row['reason'][:100]}"
              f" ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)

    try:
        for r, path in zip(runs, (args.out, args.alone_out)):
            r.out = open(path, "w", encoding="utf-8") if path else None
        with server:
            run_in_turns(items, runs, backends, note, args.concurrency)
    finally:
        for r in runs:
            if r.out is not None:
                r.out.close()
        if backends is not None:
            backends.close()
    return runs[0].rows, meta


def _load(args: argparse.Namespace):
    """(the in-process server over MODEL and --router's model, the rows' meta)."""
    from hearth.evals.server import InProcessServer
    from hearth.llm import LLM

    # the same prompt twice (routed, then alone): a cache hit would flatter the second run
    engine = {"max_num_seqs": args.concurrency, "threads": args.threads,
              **({"enable_prefix_caching": False} if args.alone_out else {})}
    llm = LLM(args.model, progress=True, max_model_len=_context(args.model, args.max_model_len), **engine)
    small = (LLM(args.router, progress=True, max_model_len=_context(args.router, args.max_model_len), **engine)
             if args.router else None)
    return InProcessServer(llm, small, args.router_threshold, args.router_tool_floor), _meta(args, llm, small)


def _context(model: str, asked: int | None) -> int:
    """--max-model-len, else EVAL_CONTEXT or the model's own when shorter, read from the file's header:
    the load said "using that, not the 16,384 asked for" of a default nobody asked for (SmolLM2: 8,192)."""
    if asked is not None:
        return asked
    from hearth.loader.gguf_loader import GGUFFile
    from hearth.loader.resolve import resolve_model
    from hearth.memory.gguf_shape import shape_from_gguf

    return min(EVAL_CONTEXT, shape_from_gguf(GGUFFile(resolve_model(model))).context_length)


def _meta(args: argparse.Namespace, llm, small) -> dict:
    from hearth.loader.fingerprint import model_fingerprint

    sha = model_fingerprint(llm.path) if llm is not None else f"external:{args.url}"
    meta = {"commit": _commit(), "model": args.model, "model_sha256": sha, "mode": args.mode}
    if small is not None:
        meta |= {"router_model": args.router, "router_sha256": model_fingerprint(small.path),
                 "router_threshold": args.router_threshold, "router_tool_floor": args.router_tool_floor}
    return meta


def _check_flags(args: argparse.Namespace) -> None:
    """The flags that combine or range wrongly, each one line, before anything loads."""
    if args.router:
        from hearth.tool_guard.routing import check_threshold

        check_threshold(args.router_threshold)
        check_threshold(args.router_tool_floor, "--router-tool-floor")
        if args.url:
            raise HearthError("--router needs the models loaded here: not with --url")
    elif given := [f for f, v in (("--router-threshold", args.router_threshold),
                                  ("--router-tool-floor", args.router_tool_floor)) if v]:
        raise HearthError(f"{' and '.join(given)} {'needs' if len(given) == 1 else 'need'} --router SMALL")
    elif args.alone_out:
        raise HearthError("--alone-out needs --router SMALL")
    if args.limit < 0:
        raise HearthError(f"--limit must be 0 (all) or more, not {args.limit}")
    if args.offset and args.limit <= 0:
        raise HearthError("--offset needs --limit N (it shifts the N picks of each category)")
    if args.offset < 0:
        raise HearthError(f"--offset must be 0 or more, not {args.offset}")
    if args.concurrency < 1:
        raise HearthError(f"--concurrency must be 1 or more, not {args.concurrency}")
    if args.decline_below is not None and not 0 <= args.decline_below <= 1:
        raise HearthError(f"--decline-below must be in [0, 1], not {args.decline_below}")


def _commit() -> str:
    """hearth's git commit, with -dirty when the tree has changes; "unknown" outside a checkout."""
    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return (sha + ("-dirty" if dirty else "")) if sha else "unknown"
