"""The router's threshold swept, computed from two saved runs instead of one run per threshold:
a `--router SMALL --router-threshold 0` run (its rows carry, per single-turn item, the small
model's decision, confidence and seconds, and the result of the small model's call wherever it
was valid) and a run of the main model alone on the same items. At threshold t an item the small
model's call answered with confidence >= t keeps that row's result and latency; any other item
is answered by the main model: the main run's result, after the small model's seconds (its
attempt runs first, and is stopped at the first token that takes its call's confidence below t:
it costs the seconds to that token, from the row's `lows`; rows from before those were recorded
stop at the tool's name when its confidence there is below t, hearth.tool_guard.name_read). Rows
the router skipped or fell back on at 0 are taken as they ran."""

from __future__ import annotations

from dataclasses import dataclass

from hearth.errors import HearthError
from hearth.evals.stats import percentile, wilson

THRESHOLDS = (0.0, 0.3, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98, 0.99, 1.0)


@dataclass(frozen=True, slots=True)
class Point:
    threshold: float
    n: int
    passed: int
    routed: int
    """Items the small model's call answered."""
    median_s: float

    @property
    def accuracy(self) -> float:
        return self.passed / self.n if self.n else 0.0


def sweep(router_rows: list[dict], main_rows: list[dict], thresholds=THRESHOLDS) -> dict:
    """{"points": [Point per threshold], "main": Point of the main model alone, "ids": items used}."""
    main = {r["id"]: r for r in main_rows}
    rows = [r for r in router_rows if r.get("requests") == 1 and r.get("router") and r["id"] in main]
    if not rows:
        raise HearthError("--sweep: no single-turn rows with a router decision that the main run also has "
                          "(the first file must come from --router SMALL --router-threshold 0)")
    if any(r["router"][0].get("threshold", 0) > 0 for r in rows):
        raise HearthError("--sweep: the router run must use --router-threshold 0 (then every valid call is kept)")
    points = [_point(t, [_at(r, main[r["id"]], t) for r in rows]) for t in thresholds]
    alone = _point(1.0, [(main[r["id"]]["result"] == "pass", main[r["id"]]["latency_s"][0], False) for r in rows])
    return {"points": points, "main": alone, "ids": len(rows)}


def _at(row: dict, main: dict, t: float) -> tuple[bool, float, bool]:
    """(passed, seconds, routed) of one item at threshold t."""
    r = row["router"][0]
    if r["decision"] == "accepted" and r["confidence"] is not None and r["confidence"] >= t:
        return row["result"] == "pass", row["latency_s"][0], True
    if r["decision"] != "accepted":  # skipped, or fell back at 0 already: the row is what ran
        return row["result"] == "pass", row["latency_s"][0], False
    return main["result"] == "pass", _stopped_s(r, t) + main["latency_s"][0], False


def _stopped_s(r: dict, t: float) -> float:
    """Seconds the small model's attempt runs at threshold t before the main model starts."""
    at = [s for c, s in r.get("lows") or [] if c < t][:1]
    if r.get("name_confidence") is not None and r["name_confidence"] < t and "name_s" in r:
        at.append(r["name_s"])
    return min(at, default=r.get("latency_s", 0.0))


def _point(t: float, outcomes: list[tuple[bool, float, bool]]) -> Point:
    return Point(t, len(outcomes), sum(o[0] for o in outcomes), sum(o[2] for o in outcomes),
                 percentile([o[1] for o in outcomes], 50))


def render(result: dict) -> str:
    main = result["main"]
    lines = [f"router sweep (computed from saved rows), {result['ids']} single-turn items",
             f"{'threshold':>9}  {'routed':>6}  {'accuracy':>8}  {'95% CI (Wilson)':>16}  {'median s':>8}  {'vs main':>7}"]
    for p in result["points"]:
        lo, hi = wilson(p.passed, p.n)
        lines.append(f"{p.threshold:>9.2f}  {p.routed:>6}  {p.accuracy:>8.1%}  [{lo:>5.1%}, {hi:>5.1%}]  "
                     f"{p.median_s:>8.2f}  {p.median_s / main.median_s:>6.2f}x")
    lo, hi = wilson(main.passed, main.n)
    lines.append(f"{'main':>9}  {0:>6}  {main.accuracy:>8.1%}  [{lo:>5.1%}, {hi:>5.1%}]  {main.median_s:>8.2f}  1.00x")
    return "\n".join(lines)
