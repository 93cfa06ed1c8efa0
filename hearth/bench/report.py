"""results.json and the summary printed at the end of a run."""

from __future__ import annotations

import datetime
import os
import platform
from importlib import metadata

from hearth.memory.this_machine import cpu_name, system_memory
from hearth.memory.units import nbytes

VERSION = 1


def machine() -> dict:
    try:
        hearth_version = metadata.version("hearth")
    except metadata.PackageNotFoundError:
        hearth_version = None
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None  # others' work skews a shared machine
    return {"cpu": cpu_name(), "cores": os.cpu_count(), "memory_bytes": system_memory(),
            "os": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
            "hearth": hearth_version, "load_average_1m": load}


def build_results(workload, mode: str, target: dict, levels: list[dict], quality: dict,
                  peak_rss: int | None, peak_rss_per_level: bool | None = None) -> dict:
    return {
        "hearth_bench": VERSION,
        "created": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "mode": mode,
        "target": target,
        "machine": machine(),
        "workload": {"name": workload.name, "seed": workload.seed, "max_tokens": workload.max_tokens,
                     "concurrency": [lv.concurrency for lv in workload.levels],
                     "requests": [len(lv.requests) for lv in workload.levels], "sampling": "greedy"},
        "levels": levels,
        "peak_rss_bytes": peak_rss,
        "peak_rss_per_level": peak_rss_per_level,
        "speculative_decoding": target.get("speculative_config"),
        "acceptance_length": acceptance_length(levels),
        "quality": quality,
    }


def acceptance_length(levels: list[dict]) -> float | None:
    """Output tokens per target forward of a sequence over every level; None without speculation."""
    specs = [(lv["speculative"], lv["output_tokens"]) for lv in levels if lv.get("speculative")]
    if not specs:
        return None
    out = sum(n for _, n in specs)
    forwards = out - sum(s["accepted_tokens"] for s, _ in specs)
    return out / forwards if forwards > 0 else None


def _acceptance_text(results: dict) -> str:
    spec, length = results.get("speculative_decoding"), results.get("acceptance_length")
    if not spec:
        return "acceptance length n/a (no speculative decoding)"
    if length is None:
        return f"acceptance length n/a ({spec['method']}: no output measured)"
    drafted = sum((lv.get("speculative") or {}).get("draft_tokens", 0) for lv in results["levels"])
    accepted = sum((lv.get("speculative") or {}).get("accepted_tokens", 0) for lv in results["levels"])
    return (f"acceptance length {length:.2f} tokens per forward ({spec['method']}: {accepted:,} of "
            f"{drafted:,} drafted tokens accepted){_policy_text(results['levels'])}")


POLICY_COUNTS = ("steps", "steps_drafting", "steps_batch_off", "paused", "paused_failing", "paused_not_paying")
"""The policy's spec-decode counters a level holds (hearth.bench.local_client; the pauses split as /metrics
splits them, hearth.api.metrics)."""


def policy_text(counts: dict) -> str:
    """The policy's decisions from spec-decode counter deltas (steps, steps_drafting, ...)."""
    steps = counts.get("steps") or 0
    if not steps:
        return "no decode steps"
    paused = f"{counts['paused']:,} request-steps paused"
    if "paused_failing" in counts:  # results.json written before the split holds the total alone
        paused += (f" ({counts['paused_failing']:,} as the drafts kept failing, {counts['paused_not_paying']:,} "
                   "as they would not pay)")
    return (f"drafts on in {counts['steps_drafting'] / steps:.0%} of {steps:,} decode steps, off for the batch "
            f"size in {counts['steps_batch_off'] / steps:.0%}, {paused}")


def _policy_text(levels: list[dict]) -> str:
    specs = [lv["speculative"] for lv in levels if lv.get("speculative") and "steps" in lv["speculative"]]
    if not specs:
        return ""
    total = {k: sum(s[k] for s in specs) for k in POLICY_COUNTS if all(k in s for s in specs)}
    return "; policy: " + policy_text(total)


def _pair(summary: dict | None, a: str, b: str, scale: float = 1.0, fmt: str = "{:.2f}") -> str:
    if not summary:
        return "-"
    return f"{fmt.format(summary[a] * scale)} / {fmt.format(summary[b] * scale)}"


COLUMNS = ("conc", "reqs", "fail", "out tok/s", "TTFT p50/p99 s", "ITL p50/p99 ms", "tok/s/req p50/p1", "% ceiling",
           "peak RSS")


def level_row(lv: dict) -> tuple[str, ...]:
    ceiling = lv.get("decode_ceiling")
    pct = pct_text(ceiling.get("pct") if ceiling else None)
    return (str(lv["concurrency"]), str(lv["requests"]), str(lv["failed"]), f"{lv['output_tok_s']:.1f}",
            _pair(lv["ttft_s"], "p50", "p99"), _pair(lv["itl_s"], "p50", "p99", 1000, "{:.1f}"),
            _pair(lv["decode_tok_s"], "p50", "p1", fmt="{:.1f}"), pct,
            nbytes(lv["peak_rss_bytes"]) if lv.get("peak_rss_bytes") else "-")


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in rows]


def _agreement(a: dict) -> str:
    return (f"{a['agreement']:.1%} of {a['unit']} identical, "
            f"{a['exact_match']:.0%} of {a['compared']} outputs exactly equal")


def _quality_line(q: dict) -> str:
    head = f"greedy agreement: {q['status']} {q['reference']}"
    if q.get("agreement") is not None:
        return f"{head}: {_agreement(q)}"
    if q.get("compared") == 0:
        return f"{head}: no prompt in common"
    return head


def pct_text(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v:.0f}%" if v >= 10 else f"{v:.2g}%"


def format_summary(results: dict, files: list[str]) -> str:
    t, w = results["target"], results["workload"]
    lines = [f"hearth bench  {w['name']} (seed {w['seed']}, up to {w['max_tokens']} tokens, greedy) "
             f"on {t.get('model') or t.get('served_model')} via {t.get('url') or 'the in-process engine'}",
             f"machine       {results['machine']['cpu']}, {results['machine']['cores']} cores", ""]
    lines += _table([COLUMNS, *(level_row(lv) for lv in results["levels"])])
    failed = [(lv["concurrency"], lv["errors"][0]) for lv in results["levels"] if lv["errors"]]
    lines += [f"failed at concurrency {c}: {error}" for c, error in failed]
    rss = results["peak_rss_bytes"]
    lines += ["", f"peak RSS {nbytes(rss) if rss else 'n/a (not in-process; give --server-pid)'}; "
                  + _acceptance_text(results), _quality_line(results["quality"])]
    ceiling = next((lv["decode_ceiling"] for lv in results["levels"] if lv.get("decode_ceiling")), None)
    lines.append(f"decode ceiling: {ceiling['reason']}" if ceiling else
                 "decode ceiling: n/a (give --model a local GGUF to compare with the roofline)")
    lines.append("wrote " + ", ".join(files))
    return "\n".join(lines)
