"""The numbers of a `hearth eval tools` run, from its JSONL rows alone (so a saved run can be
reported and compared later): accuracy per category with a 95% Wilson interval, the share of
responses that tried to call and did so validly, the hallucinated-call rate on irrelevance,
latency and tokens per request; and McNemar's exact test between two runs paired by item id."""

from __future__ import annotations

import json
from pathlib import Path

from hearth.errors import HearthError
from hearth.evals.stats import mcnemar_exact, mean, percentile, wilson


def summarize(rows: list[dict]) -> dict:
    cats: dict[str, list[dict]] = {}
    for r in rows:
        cats.setdefault(r["category"], []).append(r)
    per = {c: _accuracy(rs) for c, rs in cats.items()}
    lat = [x for r in rows for x in r["latency_s"]]
    called = sum(r["called"] for r in rows)
    irr = cats.get("irrelevance", [])
    requests = sum(r["requests"] for r in rows)
    return {
        "categories": per,
        "overall": _accuracy(rows),
        "format_validity": {"valid": sum(r["valid_calls"] for r in rows), "attempted": called,
                            "share": sum(r["valid_calls"] for r in rows) / called if called else None},
        "irrelevance_hallucinated_calls": (sum(r["result"] != "pass" for r in irr) / len(irr)) if irr else None,
        "latency_s": {"mean": mean(lat), "p95": percentile(lat, 95)},
        "tokens_per_request": {"prompt": mean([x for r in rows for x in r["prompt_tokens"]]),
                               "completion": mean([x for r in rows for x in r["completion_tokens"]])},
        "retries_per_request": sum(r.get("retries", 0) for r in rows) / requests if requests else None,
        "requests": requests,
        "declined": sum(r.get("declined", 0) for r in rows),
    }


def _accuracy(rows: list[dict]) -> dict:
    n, k = len(rows), sum(r["result"] == "pass" for r in rows)
    lo, hi = wilson(k, n)
    return {"n": n, "passed": k, "accuracy": k / n if n else None, "ci95": [lo, hi]}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:5.1f}%"


def render(summary: dict, meta: dict) -> str:
    lines = [f"BFCL v4 tool calling: {meta.get('model')} (mode {meta.get('mode')}, commit {meta.get('commit')})",
             f"{'category':<20} {'n':>4} {'pass':>5} {'accuracy':>9}   95% CI (Wilson)"]
    for name, a in [*summary["categories"].items(), ("overall", summary["overall"])]:
        lo, hi = a["ci95"]
        lines.append(f"{name:<20} {a['n']:>4} {a['passed']:>5} {_pct(a['accuracy']):>9}   [{_pct(lo)}, {_pct(hi)}]")
    fv, lat, tok = summary["format_validity"], summary["latency_s"], summary["tokens_per_request"]
    lines.append(f"valid calls: {_pct(fv['share'])} of {fv['attempted']} responses that called "
                 "(offered tool, arguments valid against its schema)")
    if summary["irrelevance_hallucinated_calls"] is not None:
        lines.append(f"hallucinated calls on irrelevance: {_pct(summary['irrelevance_hallucinated_calls'])}")
    if lat["mean"] is not None:
        lines.append(f"per request ({summary['requests']}): latency mean {lat['mean']:.2f} s, p95 {lat['p95']:.2f} s; "
                     f"tokens {tok['prompt']:.0f} prompt, {tok['completion']:.1f} completion; "
                     f"retries {summary['retries_per_request']:.2f}")
    return "\n".join(lines)


def read_rows(path: str | Path) -> list[dict]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise HearthError(f"cannot read {path}: {e.strerror or e}") from None
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError:
                raise HearthError(f"{path} line {n}: not JSON") from None
    if not rows or not all(isinstance(r, dict) and {"id", "category", "result"} <= r.keys() for r in rows):
        raise HearthError(f"{path}: not the rows of a `hearth eval tools --out` run")
    return rows


def compare(a: list[dict], b: list[dict]) -> dict:
    """Paired by (category, id); items in only one run are counted, not compared."""
    ka = {(r["category"], r["id"]): r["result"] == "pass" for r in a}
    kb = {(r["category"], r["id"]): r["result"] == "pass" for r in b}
    both = sorted(ka.keys() & kb.keys())
    out = {}
    for cat in sorted({c for c, _ in both}) + ["overall"]:
        keys = [k for k in both if cat in ("overall", k[0])]
        only_a = sum(ka[k] and not kb[k] for k in keys)
        only_b = sum(kb[k] and not ka[k] for k in keys)
        out[cat] = {"n": len(keys), "a": sum(ka[k] for k in keys), "b": sum(kb[k] for k in keys),
                    "only_a": only_a, "only_b": only_b, "p": mcnemar_exact(only_a, only_b)}
    out["unpaired"] = len(ka.keys() ^ kb.keys())
    return out


def render_compare(result: dict, name_a: str, name_b: str) -> str:
    lines = [f"McNemar's exact test, A = {name_a}, B = {name_b} (paired by item id)",
             f"{'category':<20} {'n':>4} {'A pass':>7} {'B pass':>7} {'A only':>7} {'B only':>7} {'p':>8}"]
    for cat, r in result.items():
        if cat != "unpaired":
            lines.append(f"{cat:<20} {r['n']:>4} {r['a']:>7} {r['b']:>7} {r['only_a']:>7} {r['only_b']:>7} {r['p']:>8.4f}")
    if result["unpaired"]:
        lines.append(f"{result['unpaired']} items are in only one of the runs and were left out")
    return "\n".join(lines)
