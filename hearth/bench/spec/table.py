"""Compared rows (rows.compare) as markdown: the conditions in one line, then one table per
workload, first sight then repeated for each variant in the order they ran."""

from __future__ import annotations

HEADER = ("variant", "sight", "tokens", "decode tok/s", "end-to-end tok/s", "TTFT (s)", "accept. length",
          "accepted / drafted", "= plain greedy", "x hearth plain", "x llama.cpp best")
LEGEND = ("decode tok/s: output tokens after the first over the time from the first streamed chunk to the "
          "last; end-to-end: all output tokens over the request's whole time, prefill included. Acceptance "
          "length: tokens committed per target forward while decoding ((n-1) / (n-1-accepted)). "
          "= plain greedy: the text equals the same engine's plain greedy text (first sight). Ratios are of "
          "decode tok/s on the same workload and sight; llama.cpp best is its fastest variant there.")


def _num(v, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def _equal(v) -> str:
    return "-" if v is None else ("yes" if v else "**no**")


def _cells(r: dict) -> list[str]:
    if r["error"]:
        return [f"{r['engine']} {r['config_name']}", r["sight"], "error: " + r["error"][:60], *["-"] * 8]
    drafted = "-" if not r["draft_tokens"] else f"{r['accepted']:.0f} / {r['draft_tokens']:.0f}"
    return [f"{r['engine']} {r['config_name']}", r["sight"], _num(r["tokens"], "{}"), _num(r["decode_tok_s"]),
            _num(r["e2e_tok_s"]), _num(r["ttft_s"], "{:.2f}"), _num(r["acceptance_len"], "{:.2f}"), drafted,
            _equal(r["equal"]), _num(r["vs_hearth_plain"], "{:.2f}x"),
            _num(r["vs_llama_best"], "{:.2f}x") + (f" ({r['llama_best']})" if r["vs_llama_best"] and
                                                    r["engine"] == "hearth" else "")]


def conditions(run: dict) -> str:
    peer = f", llama-server {run['llama_server']}" if run.get("llama_server") else ""
    return (f"**Conditions:** hearth commit {run['commit']}{peer}, CPU {run['cpu']} (hearth tier {run['cpu_tier']}), "
            f"{run['threads']} threads per engine, one server at a time, greedy, max {run['max_tokens']} tokens; "
            f"target {run['model']} (sha256 {run['model_sha256'][:12]}), draft {run['draft']} "
            f"(sha256 {run['draft_sha256'][:12]}); 1-minute load average {run['load_avg_1m']:.1f} at the start.")


SUMMARY_HEADER = ("workload", "sight", "hearth plain tok/s", "hearth best", "llama.cpp best", "hearth best / llama.cpp best")


def _best(rows: list[dict], engine: str) -> dict | None:
    ok = [r for r in rows if r["engine"] == engine and not r["error"] and r["decode_tok_s"]]
    return max(ok, key=lambda r: r["decode_tok_s"]) if ok else None


def _named(r: dict | None) -> str:
    if r is None:
        return "-"
    changed = "" if r["equal"] is not False else ", text changed"
    return f"{r['decode_tok_s']:.1f} ({r['config_name']}{changed})"


def summary(rows: list[dict]) -> list[str]:
    """Per workload and sight: each engine's fastest variant, and hearth's best over llama.cpp's."""
    lines = ["| " + " | ".join(SUMMARY_HEADER) + " |", "|" + "---|" * len(SUMMARY_HEADER)]
    for key in dict.fromkeys((r["workload"], r["sight"]) for r in rows):
        here = [r for r in rows if (r["workload"], r["sight"]) == key]
        plain = next((r for r in here if r["engine"] == "hearth" and r["config_name"] == "plain"), None)
        h, ll = _best(here, "hearth"), _best(here, "llama.cpp")
        ratio = f"{h['decode_tok_s'] / ll['decode_tok_s']:.2f}x" if h and ll else "-"
        lines.append(f"| {key[0]} | {key[1]} | {_num(plain and plain['decode_tok_s'])} | {_named(h)} | "
                     f"{_named(ll)} | {ratio} |")
    return lines


def markdown(rows: list[dict], run: dict) -> str:
    lines = [conditions(run), "", *summary(rows), ""]
    for workload in dict.fromkeys(r["workload"] for r in rows):
        lines += [f"### {workload}", "", "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
        lines += ["| " + " | ".join(_cells(r)) + " |" for r in rows if r["workload"] == workload]
        lines.append("")
    lines.append(LEGEND)
    return "\n".join(lines) + "\n"
