"""Speculative decoding side by side (issue 19, point 7): hearth's proposers against llama-server's
speculative types on the same GGUFs (Qwen2.5-Coder-1.5B target, 0.5B draft), 2 threads each,
greedy, one server at a time, over HTTP (/v1/chat/completions, each server templating the prompt).

For each workload (code-edit, code-gen, chat, drafts-fail) and variant, a fresh server is started, warmed up on
an unrelated prompt, sent the workload's request ("first" sight) and then the same request again
("repeat": where prefix and cross-request caches pay), and stopped. Reported per row: decode and
end-to-end tok/s, acceptance length, whether the text equals the engine's plain greedy, and ratios
to hearth plain and to llama.cpp's best variant. Variants are JSON, so new methods need no code:

    .venv/bin/python benchmarks/bench_spec.py                   # everything, ~45 min on 2 quiet cores
    .venv/bin/python benchmarks/bench_spec.py --quick           # smoke test: code-edit, 32 tokens
    .venv/bin/python benchmarks/bench_spec.py --workloads code-edit \\
        --hearth-configs '{"plain": null, "suffix": {"method": "suffix"}}' --llama-configs '{}'

Build llama-server first: benchmarks/setup_llama_server.sh.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's hearth, the one its servers run (cwd=ROOT) and commit names

from hearth.bench import BenchError  # noqa: E402
from hearth.bench.spec import client, prompts, rows, table, variants  # noqa: E402
from hearth.bench.spec.servers import Server, free_port  # noqa: E402

LLAMA_SERVER = Path(os.environ.get("LLAMA_SERVER_BUILD_DIR", "/work/llama-server-build")) / "bin/llama-server"
WARMUP = [{"role": "user", "content": "Say hello in one word."}]
# for the estimate: seconds to start a server and decode tok/s, both pessimistic for 2 quiet cores
START_S, PREFILL_S, DECODE_TOK_S = 30.0, 10.0, 8.0


def git_commit() -> str:
    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "--short=12", "HEAD") or "unknown"
    return commit + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            return next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown"


def model_sha256(path: Path) -> str:
    from hearth.loader.store import marker_sha256, sha256_file

    return marker_sha256(path) or sha256_file(path)


def llama_version(binary: Path) -> str | None:
    try:
        done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return next((ln.removeprefix("version: ") for ln in (done.stdout + done.stderr).splitlines()
                 if ln.startswith("version: ")), None)


def run_info(args, launch: variants.Launch) -> dict:
    from hearth.kernels import tiers

    return {"commit": git_commit(), "llama_server": llama_version(launch.llama_server), "cpu": cpu_name(),
            "cpu_tier": tiers.active(), "threads": args.threads, "max_tokens": args.max_tokens, "model": launch.model.name, "model_sha256": model_sha256(launch.model),
            "draft": launch.draft.name, "draft_sha256": model_sha256(launch.draft),
            "load_avg_1m": os.getloadavg()[0], "created": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def measure(v: variants.Variant, prompt: prompts.SpecPrompt, launch: variants.Launch, args, run: dict,
            out: Path) -> list[dict]:
    """A fresh server for this variant and workload: warm-up, then first sight, then repeated."""
    port = free_port()
    command = variants.ENGINES[v.engine](v, launch, port)
    log = out / "logs" / f"{prompt.name}.{v.engine}.{v.name}.log"
    found = []
    with Server(command, port, log, cwd=ROOT) as server:
        warm = client.chat(server.url, WARMUP, 8, args.seed)
        if warm.error:
            raise BenchError(f"{v.label}: the warm-up request failed: {warm.error} (log {log})")
        for sight in rows.SIGHTS:
            before = client.spec_counters(server.url)
            s = client.chat(server.url, list(prompt.messages), args.max_tokens, args.seed)
            s.counters = client.counter_delta(before, client.spec_counters(server.url))
            shared = {**run, "server_ready_s": server.ready_s, "load_avg_1m": os.getloadavg()[0]}
            row = rows.sample_row(s, v, prompt.name, sight, shared)
            found.append(row)
            print(f"  {prompt.name:9} {v.label:24} {sight:6} {row['tokens'] or 0:4} tokens "
                  f"decode {row['decode_tok_s'] or 0:6.1f} tok/s  accept. len "
                  f"{row['acceptance_len'] or 0:4.2f}  load {os.getloadavg()[0]:.1f}"
                  + (f"  ERROR {row['error']}" if row["error"] else ""), file=sys.stderr, flush=True)
    return found


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-coder-1.5b", help="target: catalog name or .gguf")
    ap.add_argument("--draft", default="qwen2.5-coder-0.5b", help='draft model ("{draft}" in configs)')
    ap.add_argument("--workloads", default=",".join(prompts.names()), help="comma-separated (default: all)")
    ap.add_argument("--hearth-configs", default=None, metavar="JSON",
                    help='{"name": speculative_config or null} (default: '
                         f"{json.dumps(variants.DEFAULT_HEARTH)})")
    ap.add_argument("--llama-configs", default=None, metavar="JSON",
                    help=f'{{"name": [llama-server args]}} (default: {json.dumps(variants.DEFAULT_LLAMA)})')
    ap.add_argument("--only", default=None, help='comma-separated variant labels, e.g. "hearth plain,llama.cpp plain"')
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--llama-server", type=Path, default=LLAMA_SERVER)
    ap.add_argument("--out", type=Path, default=None, help="results dir (default: /tmp/hearth-bench-spec-<time>)")
    ap.add_argument("--quick", action="store_true", help="smoke test: code-edit only, 32 tokens")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and the estimated time, run nothing")
    args = ap.parse_args(argv)
    if args.quick:
        args.workloads, args.max_tokens = "code-edit", min(args.max_tokens, 32)
    if args.max_tokens < 1 or args.threads < 1:
        raise BenchError("--max-tokens and --threads must be at least 1")
    return args


def plan(args) -> tuple[list[prompts.SpecPrompt], list[variants.Variant]]:
    workloads = [prompts.spec_prompt(w.strip()) for w in args.workloads.split(",") if w.strip()]
    found = (variants.parse_variants("hearth", args.hearth_configs, variants.DEFAULT_HEARTH, "--hearth-configs")
             + variants.parse_variants("llama.cpp", args.llama_configs, variants.DEFAULT_LLAMA, "--llama-configs"))
    chosen = variants.select(found, args.only)
    if not workloads or not chosen:
        raise BenchError("nothing to run: no workload or no variant")
    return workloads, chosen


def estimate_s(n_servers: int, max_tokens: int) -> float:
    return n_servers * (START_S + len(rows.SIGHTS) * (PREFILL_S + max_tokens / DECODE_TOK_S))


def _interrupted(signum, frame):
    raise KeyboardInterrupt  # SIGTERM unwinds like Ctrl-C, so every `with Server` stops its process


def main(argv=None) -> int:
    args = parse_args(argv)
    workloads, chosen = plan(args)
    minutes = estimate_s(len(workloads) * len(chosen), args.max_tokens) / 60
    print(f"{len(workloads)} workloads x {len(chosen)} variants = {len(workloads) * len(chosen)} server runs, "
          f"{args.max_tokens} max tokens: about {minutes:.0f} min on 2 quiet cores", file=sys.stderr)
    if args.dry_run:
        for v in chosen:
            print(f"  {v.label}: {json.dumps(v.config)}", file=sys.stderr)
        return 0
    if any(v.engine == "llama.cpp" for v in chosen) and not args.llama_server.exists():
        raise BenchError(f"{args.llama_server} is missing: run benchmarks/setup_llama_server.sh")
    from hearth.loader.resolve import resolve_model

    launch = variants.Launch(resolve_model(args.model), resolve_model(args.draft), args.threads, args.llama_server)
    out = args.out or Path(f"/tmp/hearth-bench-spec-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    run = run_info(args, launch)
    signal.signal(signal.SIGTERM, _interrupted)
    found: list[dict] = []
    with open(out / "rows.partial.jsonl", "w") as partial:
        for prompt in workloads:
            for v in chosen:
                try:
                    measured = measure(v, prompt, launch, args, run, out)
                except BenchError as e:  # one variant that cannot run does not end the others
                    print(f"  {prompt.name:9} {v.label:24} FAILED: {e}", file=sys.stderr, flush=True)
                    measured = [rows.error_row(v, prompt.name, sight, run, str(e).splitlines()[0])
                                for sight in rows.SIGHTS]
                for row in measured:
                    found.append(row)
                    partial.write(json.dumps(row) + "\n")
                    partial.flush()
    compared = rows.compare(found)
    (out / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in compared))
    text = table.markdown(compared, run)
    (out / "table.md").write_text(text)
    print(text)
    print(f"results: {out}/table.md, {out}/rows.jsonl; server logs in {out}/logs", file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        sys.exit(f"bench_spec: {e}")
    except KeyboardInterrupt:
        sys.exit("bench_spec: interrupted; servers stopped")
