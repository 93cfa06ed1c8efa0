"""Many results.json files -> one comparison: runs grouped by workload, then by concurrency level and
target (an engine, named by `hearth bench --label`), repeats reduced to their median, and each
target's ratio to the first one (the baseline). Plain data in, plain data out; the markdown module
draws it."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from hearth.bench import BenchError

# metric -> how to read it from a level summary; None where the level does not have it
METRICS = {
    "output_tok_s": lambda lv: lv["output_tok_s"],
    "ttft_p50": lambda lv: (lv["ttft_s"] or {}).get("p50"),
    "ttft_p99": lambda lv: (lv["ttft_s"] or {}).get("p99"),
    "itl_p50": lambda lv: (lv["itl_s"] or {}).get("p50"),
    "itl_p99": lambda lv: (lv["itl_s"] or {}).get("p99"),
    "decode_tok_s_p50": lambda lv: (lv["decode_tok_s"] or {}).get("p50"),
    "pct_ceiling": lambda lv: (lv.get("decode_ceiling") or {}).get("pct"),
    "peak_rss_bytes": lambda lv: lv.get("peak_rss_bytes"),
}


def target_label(results: dict) -> str:
    """--label when the run had one; else the in-process engine, or the served model at its host."""
    t = results["target"]
    if t.get("label"):
        return t["label"]
    if results["mode"] == "local":
        return "hearth (in-process)"
    return f"{t.get('served_model')} at {urlsplit(t['url']).netloc}"


@dataclass(slots=True)
class Cell:
    """One target at one level: medians over its repeats."""

    label: str
    runs: int
    failed: int
    values: dict[str, float | None]


@dataclass(slots=True)
class LevelRow:
    concurrency: int
    cells: list[Cell]
    """Targets in baseline-first order."""
    baseline: str

    def ratios(self) -> list[tuple[str, dict[str, float | None]]]:
        """(label, metric -> target / baseline) for every target after the baseline present here."""
        if len(self.cells) < 2 or self.cells[0].label != self.baseline:
            return []
        base = self.cells[0].values
        return [(c.label, {k: _ratio(v, base[k]) for k, v in c.values.items()}) for c in self.cells[1:]]


@dataclass(slots=True)
class Group:
    """Every run of one workload shape (name, output length, levels) across targets and repeats."""

    workload: dict
    """The first run's workload block (name, max_tokens, concurrency, requests, ...)."""
    results: list[dict] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    rows: list[LevelRow] = field(default_factory=list)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _key(results: dict) -> tuple:
    w = results["workload"]
    return w["name"], w["max_tokens"], tuple(w["concurrency"]), tuple(w["requests"])


def labels_in_order(all_results: list[dict], baseline: str | None = None) -> list[str]:
    """Targets in the order they first appear, the baseline of every ratio first (default: the first)."""
    labels = list(dict.fromkeys(target_label(r) for r in all_results))
    if baseline is None:
        return labels
    if baseline not in labels:
        raise BenchError(f"--baseline {baseline!r} is none of the targets: {', '.join(labels)}")
    return [baseline, *(label for label in labels if label != baseline)]


def compare(all_results: list[dict], baseline: str | None = None) -> list[Group]:
    labels = labels_in_order(all_results, baseline)
    groups: dict[tuple, Group] = {}
    for r in all_results:
        g = groups.setdefault(_key(r), Group(r["workload"]))
        g.results.append(r)
        if r["workload"]["seed"] not in g.seeds:
            g.seeds.append(r["workload"]["seed"])
    for g in groups.values():
        g.rows = [_level_row(g.results, c, labels) for c in g.workload["concurrency"]]
    return list(groups.values())


def _level_row(results: list[dict], concurrency: int, labels: list[str]) -> LevelRow:
    cells = []
    for label in labels:
        levels = [lv for r in results if target_label(r) == label
                  for lv in r["levels"] if lv["concurrency"] == concurrency]
        if levels:
            values = {k: _median([read(lv) for lv in levels]) for k, read in METRICS.items()}
            cells.append(Cell(label, len(levels), sum(lv["failed"] for lv in levels), values))
    return LevelRow(concurrency, cells, labels[0])


def agreements(group: Group) -> list[tuple[str, str, dict]]:
    """(target, whose outputs it was compared with, median agreement figures) per compared target.
    The reference's author is the run of this group that wrote that reference file."""
    authors = {r["quality"]["reference"]: target_label(r) for r in group.results
               if r["quality"]["status"] == "reference written to"}
    found: dict[tuple[str, str], list[dict]] = {}
    for r in group.results:
        q = r["quality"]
        if q["status"] == "compared with" and q.get("agreement") is not None:
            against = authors.get(q["reference"], f"the reference {Path(q['reference']).name}")
            found.setdefault((target_label(r), against), []).append(q)
    return [(label, against, {"runs": len(qs), "unit": qs[0]["unit"],
                              "agreement": _median([q["agreement"] for q in qs]),
                              "exact_match": _median([q["exact_match"] for q in qs])})
            for (label, against), qs in found.items()]
