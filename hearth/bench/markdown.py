"""The benchmark as markdown, for a README: the machine in one line, `hearth plan`'s figures per
model, then one table per workload with each target's medians per concurrency level and every
target's ratio to the baseline (the first target)."""

from __future__ import annotations

from pathlib import Path

from hearth.bench import BenchError
from hearth.bench.compare import Group, agreements, compare, labels_in_order, target_label
from hearth.bench.report import pct_text
from hearth.memory.figure_text import figure_text
from hearth.memory.units import nbytes, rate

SAME_MACHINE = ("cpu", "cores", "memory_bytes")
COLUMNS = ("concurrency", "engine", "output tok/s", "TTFT p50 / p99 (s)", "ITL p50 / p99 (ms)",
           "tok/s per request (p50)", "% of decode ceiling", "peak RSS")
LEGEND = ("output tok/s: every output token of the level over its wall time. TTFT and ITL: as the "
          "client saw them, streamed. % of decode ceiling: the median request's decode tok/s over "
          "`hearth plan`'s decode ceiling for that concurrency and context, per sequence. Peak RSS: "
          "the engine process at its peak during the level. Ratios are target / baseline: above 1 is "
          "better for tok/s and % of ceiling, worse for TTFT, ITL and RSS.")


def _or_dash(v, show) -> str:
    return "-" if v is None else show(v)


def _seconds(v: float) -> str:
    return f"{v:.2f}" if v >= 0.1 else f"{v:.3f}"


def _ms(v: float) -> str:
    return f"{v * 1e3:.1f}" if v < 0.01 else f"{v * 1e3:.0f}"


def _ratio(v: float) -> str:
    return f"{v:.2f}x"


def _pair(values: dict, a: str, b: str, show) -> str:
    return f"{_or_dash(values[a], show)} / {_or_dash(values[b], show)}"


def _cells(values: dict, number, seconds, ms, pct, size) -> list[str]:
    return [_or_dash(values["output_tok_s"], number), _pair(values, "ttft_p50", "ttft_p99", seconds),
            _pair(values, "itl_p50", "itl_p99", ms), _or_dash(values["decode_tok_s_p50"], number),
            _or_dash(values["pct_ceiling"], pct), _or_dash(values["peak_rss_bytes"], size)]


def _table(header: tuple[str, ...], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows)]


def _range(values: list, show, sep: str = "-") -> str:
    lo, hi = min(values), max(values)
    return show(lo) if show(lo) == show(hi) else f"{show(lo)}{sep}{show(hi)}"


def _threads(results: list[dict]) -> str | None:
    by_label = {target_label(r): r["target"].get("threads") for r in results}
    if None in by_label.values():
        return None
    if len(set(by_label.values())) == 1:
        n = next(iter(by_label.values()))
        return f"{n} thread{'s' if n != 1 else ''} per engine"
    return "threads " + ", ".join(f"{label} {n}" for label, n in by_label.items())


def _bandwidth(results: list[dict], plans: list[dict]) -> str | None:
    """The memory bandwidth the ceilings were computed with: this machine's, measured, or a preset's."""
    known = [(r["target"]["device"], r["target"]["bandwidth"]) for r in results if r["target"].get("bandwidth")]
    known += [(p["inputs"]["device"], p["bandwidth"]) for p in plans]
    if not known:
        return None
    device, bandwidth = known[0]
    if device.startswith("this"):
        return f"{rate(bandwidth)} measured memory read bandwidth (`hearth plan`)"
    return f"ceilings for {device} ({rate(bandwidth)})"


def machine_line(results: list[dict], plans: list[dict] = ()) -> str:
    """CPU, cores, threads used, memory, bandwidth, OS, date(s) and load: what the numbers depend on."""
    machines = {tuple(r["machine"][k] for k in SAME_MACHINE) for r in results}
    if len(machines) > 1:
        raise BenchError("the results come from different machines "
                         f"({'; '.join(f'{c}, {n} cores' for c, n, _ in sorted(machines))}); "
                         "a report states one machine")
    m = results[0]["machine"]
    parts = [m["cpu"], f"{m['cores']} cores", _threads(results), f"{nbytes(m['memory_bytes'])} memory",
             _bandwidth(results, plans), m.get("os")]
    dates = [r["created"][:10] for r in results]
    when = _range(dates, str, " to ")
    loads = [r["machine"].get("load_average_1m") for r in results]
    if None not in loads:
        when += f", 1-minute load average {_range(loads, lambda v: f'{v:.1f}')}"
    return f"**Machine:** {', '.join(p for p in parts if p)}; {when}."


def plan_table(plans: list[dict]) -> list[str]:
    header = ("model", "context x sequences", "weights", "KV per token", "KV cache", "fits", "max concurrency",
              "decode ceiling, 1 / all sequences", "prefill ceiling")
    rows = []
    for p in plans:
        i = p["inputs"]
        ceiling = f"{figure_text('decode_tok_s_ceiling', p['decode_tok_s_ceiling'])} / " \
                  f"{figure_text('decode_tok_s_ceiling_aggregate', p['decode_tok_s_ceiling_aggregate'])}"
        name = i.get("model_arg") or i["model"]
        rows.append([Path(name).name if name.endswith(".gguf") else name, f"{i['ctx']:,} x {i['concurrency']}",
                     *(figure_text(k, p[k]) for k in ("weight_bytes", "kv_bytes_per_token", "kv_cache_bytes",
                                                       "fits", "max_concurrency")),
                     ceiling, figure_text("prefill_tok_s_ceiling", p["prefill_tok_s_ceiling"])])
    return _table(header, rows)


def _model(results: list[dict]) -> str:
    t = results[0]["target"]
    return Path(t["model_path"]).name if t.get("model_path") else str(t.get("model") or t.get("served_model"))


def _group_title(g: Group) -> str:
    w = g.workload
    runs = max((c.runs for row in g.rows for c in row.cells), default=0)
    requests = sorted(set(w["requests"]))
    per_level = (f"{requests[0]} request{'s' if requests[0] != 1 else ''}" if len(requests) == 1
                 else f"{'/'.join(map(str, w['requests']))} requests")
    eos = ", EOS ignored" if g.results[0]["target"].get("ignore_eos") else ""
    seeds = ", ".join(map(str, g.seeds))
    return (f"**{w['name']}**, {_model(g.results)}: concurrency {', '.join(map(str, w['concurrency']))}; "
            f"{per_level} per level of up to {w['max_tokens']} output tokens each, greedy{eos}; "
            f"median of {runs} run(s) (seed {seeds}).")


def group_table(g: Group) -> list[str]:
    rows = []
    for row in g.rows:
        for cell in row.cells:
            label = cell.label + (f" ({cell.failed} failed)" if cell.failed else "")
            rows.append([str(row.concurrency), label,
                         *_cells(cell.values, lambda v: f"{v:,.1f}", _seconds, _ms, pct_text, nbytes)])
        for label, ratios in row.ratios():
            rows.append(["", f"*{label} / {row.baseline}*", *_cells(ratios, *[_ratio] * 5)])
    lines = [_group_title(g), "", *_table(COLUMNS, rows)]
    for label, against, a in agreements(g):
        lines += ["", f"Greedy agreement, {label} with {against}: {a['agreement']:.1%} of {a['unit']} identical, "
                      f"{a['exact_match']:.0%} of outputs equal (median of {a['runs']} run(s))."]
    return lines


def render_markdown(results: list[dict], plans: list[dict] = (), intro: str | None = None,
                    baseline: str | None = None) -> str:
    """results: results.json objects (targets x workloads x repeats); plans: `hearth plan --json` objects;
    baseline: the target label ratios divide by (default: the first target in results)."""
    lines = [machine_line(results, plans)]
    if intro:
        lines += ["", intro]
    if plans:
        lines += ["", "Plan (`hearth plan MODEL --ctx C --concurrency N --json`):", "", *plan_table(plans)]
    labels = labels_in_order(results, baseline)
    if len(labels) > 1:
        lines += ["", f"Baseline: {labels[0]}."]
    for g in compare(results, baseline):
        lines += ["", *group_table(g)]
    lines += ["", LEGEND]
    return "\n".join(lines) + "\n"
