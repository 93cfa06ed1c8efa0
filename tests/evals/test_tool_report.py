"""The report and the paired comparison, from hand-made JSONL rows."""

from __future__ import annotations

import json

import pytest

from hearth.errors import HearthError
from hearth.evals.tool_report import compare, read_rows, render, render_compare, summarize


def row(cat, id, ok, called=1, valid=1, lat=(1.0,), prompt=(100,), completion=(10,), retries=0):
    return {"category": cat, "id": id, "result": "pass" if ok else "fail", "reason": "", "requests": len(lat),
            "latency_s": list(lat), "prompt_tokens": list(prompt), "completion_tokens": list(completion),
            "called": called, "valid_calls": valid, "retries": retries}


ROWS = [row("simple_python", "s0", True), row("simple_python", "s1", False, valid=0),
        row("irrelevance", "i0", True, called=0, valid=0), row("irrelevance", "i1", False, lat=(3.0,)),
        row("multi_turn_base", "m0", True, called=2, valid=1, lat=(1.0, 2.0), prompt=(100, 200), completion=(10, 30))]


def test_summary():
    s = summarize(ROWS)
    assert s["categories"]["simple_python"] == {"n": 2, "passed": 1, "accuracy": 0.5, "ci95": pytest.approx([0.0945, 0.9055], abs=1e-4)}
    assert s["overall"]["n"] == 5 and s["overall"]["passed"] == 3
    assert s["format_validity"] == {"valid": 3, "attempted": 5, "share": 0.6}
    assert s["irrelevance_hallucinated_calls"] == 0.5
    assert s["requests"] == 6
    assert s["latency_s"]["mean"] == pytest.approx(9 / 6)
    assert s["tokens_per_request"] == {"prompt": pytest.approx(700 / 6), "completion": pytest.approx(80 / 6)}
    text = render(s, {"model": "m", "mode": "bare", "commit": "abc"})
    assert "simple_python" in text and "50.0%" in text and "hallucinated calls on irrelevance:  50.0%" in text


def test_compare_pairs_by_id():
    a = [row("simple_python", f"s{i}", True) for i in range(8)] + [row("irrelevance", "i0", True)]
    b = [row("simple_python", f"s{i}", i >= 7) for i in range(8)] + [row("irrelevance", "x", True)]
    r = compare(a, b)
    assert r["simple_python"] == {"n": 8, "a": 8, "b": 1, "only_a": 7, "only_b": 0, "p": pytest.approx(2 / 128)}
    assert r["overall"]["n"] == 8 and r["unpaired"] == 2
    assert "2 items are in only one" in render_compare(r, "A", "B")


def test_read_rows(tmp_path):
    good = tmp_path / "a.jsonl"
    good.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    assert read_rows(good) == ROWS
    bad = tmp_path / "b.jsonl"
    bad.write_text('{"x": 1}\n')
    with pytest.raises(HearthError, match="not the rows"):
        read_rows(bad)
    with pytest.raises(HearthError, match="cannot read"):
        read_rows(tmp_path / "missing.jsonl")
