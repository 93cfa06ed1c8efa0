"""PNG charts: aggregate throughput against concurrency (with the decode ceiling when known) and
the latency distributions per level. matplotlib is optional (`pip install -c constraints.txt
'.[bench]'` in the checkout); without it the JSON is still written and the charts are skipped with a note."""

from __future__ import annotations

from pathlib import Path

THROUGHPUT_PNG = "throughput_vs_concurrency.png"
LATENCY_PNG = "latency.png"


def _figure(width: float, height: float):
    from matplotlib.figure import Figure  # the object API: no pyplot, no GUI backend, thread-safe

    return Figure(figsize=(width, height), dpi=110, layout="constrained")


def throughput_chart(levels: list[dict], title: str, path: Path) -> Path:
    fig = _figure(6, 4)
    ax = fig.add_subplot()
    conc = [lv["concurrency"] for lv in levels]
    ax.plot(conc, [lv["output_tok_s"] for lv in levels], "o-", label="measured output tok/s")
    ceilings = [lv.get("decode_ceiling") for lv in levels]
    if all(ceilings):
        ax.plot(conc, [c["tok_s_aggregate"] for c in ceilings], "s--", label="decode ceiling (plan)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(conc, [str(c) for c in conc])
    ax.set_xlabel("concurrent requests")
    ax.set_ylabel("tokens / s (all requests)")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.savefig(path)
    return path


def latency_chart(runs, title: str, path: Path) -> Path:
    """Box plots per concurrency level: TTFT (s) and inter-token latency (ms)."""
    fig = _figure(9, 4)
    ttft_ax, itl_ax = fig.subplots(1, 2)
    labels = [str(run.concurrency) for run in runs]
    ttft = [[r.ttft for r in run.results if r.ok and r.ttft is not None] or [0.0] for run in runs]
    itl = [[1000 * g for r in run.results if r.ok for g in r.itls] or [0.0] for run in runs]
    for ax, data, name in ((ttft_ax, ttft, "time to first token (s)"), (itl_ax, itl, "inter-token latency (ms)")):
        ax.boxplot(data, tick_labels=labels, showfliers=True)
        ax.set_xlabel("concurrent requests")
        ax.set_ylabel(name)
        ax.ticklabel_format(axis="y", style="plain", useOffset=False)
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle(title)
    fig.savefig(path)
    return path


def write_charts(levels: list[dict], runs, title: str, folder: Path) -> tuple[list[Path], str | None]:
    """(files written, why charts were skipped or None)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return [], ("charts skipped: matplotlib is not installed "
                    "(pip install -c constraints.txt '.[bench]' in hearth's checkout)")
    return [throughput_chart(levels, title, folder / THROUGHPUT_PNG),
            latency_chart(runs, title, folder / LATENCY_PNG)], None
