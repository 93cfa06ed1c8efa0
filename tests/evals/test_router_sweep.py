"""The router's threshold sweep computed from saved rows (hearth.evals.router_sweep): at threshold t
an item keeps the small model's answer when its confidence is at least t, else takes the main
run's answer after the small model's seconds (to the first token that took its call's confidence
below t, where the router stops it; in older rows, to its tool's name when its confidence there is
already below t)."""

from __future__ import annotations

import pytest

from hearth.errors import HearthError
from hearth.evals.router_sweep import render, sweep


def row(id_, result, latency, decision="accepted", confidence=None, probe_s=0.0):
    router = {"decision": decision, "confidence": confidence, "threshold": 0.0, "latency_s": probe_s}
    return {"id": id_, "result": result, "requests": 1, "latency_s": [latency], "router": [router]}


def main_row(id_, result, latency):
    return {"id": id_, "result": result, "requests": 1, "latency_s": [latency]}


ROUTER = [row("a", "pass", 1.0, confidence=0.95, probe_s=1.0),   # sure and right
          row("b", "fail", 1.0, confidence=0.40, probe_s=1.0),   # unsure and wrong
          row("c", "fail", 5.0, decision="fallback", probe_s=1.0),  # invalid already at 0: the main model's answer
          row("d", "pass", 1.0, confidence=0.70, probe_s=1.0)]
MAIN = [main_row("a", "pass", 4.0), main_row("b", "pass", 4.0), main_row("c", "fail", 4.0), main_row("d", "fail", 4.0)]


def test_each_threshold_takes_the_small_answer_only_at_or_above_it():
    got = {p.threshold: p for p in sweep(ROUTER, MAIN, thresholds=(0.0, 0.5, 0.7, 0.96))["points"]}
    assert [(got[t].passed, got[t].routed) for t in (0.0, 0.5, 0.7, 0.96)] == [(2, 3), (3, 2), (3, 2), (2, 0)]
    # at 0.5: a 1.0 (small), b 1.0 + 4.0 (main after the probe), c 5.0 (as it ran), d 1.0 -> median 3.0
    assert got[0.5].median_s == 3.0 and got[0.96].median_s == 5.0
    result = sweep(ROUTER, MAIN, thresholds=(0.5,))
    assert (result["main"].passed, result["main"].median_s) == (2, 4.0)
    assert "computed from saved rows" in render(result) and "0.75x" in render(result)


def test_rows_without_a_router_or_above_threshold_zero_are_refused():
    with pytest.raises(HearthError, match="no single-turn rows with a router decision"):
        sweep(MAIN, MAIN)
    high = [{**ROUTER[0], "router": [{**ROUTER[0]["router"][0], "threshold": 0.5}]}]
    with pytest.raises(HearthError, match="--router-threshold 0"):
        sweep(high, MAIN)


def test_a_call_unsure_at_its_name_costs_the_seconds_to_the_name():
    rows = [{**r, "router": [{**r["router"][0], "name_confidence": c, "name_s": 0.25}]}
            for r, c in zip(ROUTER[:2], (0.96, 0.45))]  # a name's confidence bounds its call's from above
    got = sweep(rows, MAIN[:2], thresholds=(0.42, 0.5))["points"]
    # a stays the small model's (1.0); b falls back: at 0.42 after its whole attempt (its name was sure
    # enough), 1.0 + 4.0; at 0.5 stopped at its name, 0.25 + 4.0
    assert [(p.passed, p.routed, p.median_s) for p in got] == [(2, 1, 3.0), (2, 1, 2.625)]


def test_a_call_costs_the_seconds_to_the_first_token_under_the_threshold():
    """`lows`: the call's confidence so far each time it fell, with the seconds there (the router
    aborts the small model at the first one under its threshold)."""
    lows = [[0.8, 0.125], [0.45, 0.375]]
    rows = [{**ROUTER[1], "router": [{**ROUTER[1]["router"][0], "confidence": 0.40, "lows": lows + [[0.40, 0.75]]}]}]
    got = sweep(rows, MAIN[1:2], thresholds=(0.3, 0.42, 0.5, 0.9))["points"]
    # at 0.3 the small answer (1.0); under 0.42 at 0.75 s, under 0.5 at 0.375 s, under 0.9 at 0.125 s
    assert [(p.routed, p.median_s) for p in got] == [(1, 1.0), (0, 4.75), (0, 4.375), (0, 4.125)]
