"""`hearth eval tools` end to end on the real Qwen2.5-Coder-0.5B: the pinned bfcl-eval wheel
(fetched into HEARTH_HOME like a model), a fixed stratified sample (one of the shortest items of each
single-turn category, one two-turn multi_turn_base item), the in-process server, the scorer, the JSONL
rows and the report. It asserts that the pipeline ran and scored, not an accuracy. The items are asked
at once (--concurrency): 11 one at a time took 27-30 CPU-s, at once 14-15 (2026-12-02). Two items a
category ran the same path twice: on 2026-12-06 the command with those 11 took 22.5 CPU-s, with these 6 18.1."""

from __future__ import annotations

import json

from hearth.cli import main
from hearth.evals.bfcl_data import CATEGORIES

IDS = ["simple_python_97", "multiple_73", "parallel_7", "parallel_multiple_48", "irrelevance_49", "multi_turn_base_100"]


def test_eval_tools_sample(model_path, tmp_path, capsys):
    out, report = tmp_path / "rows.jsonl", tmp_path / "report.json"
    rc = main(["eval", "tools", str(model_path("qwen2.5-coder-0.5b")), "--ids", ",".join(IDS),
               "--out", str(out), "--report", str(report), "--max-model-len", "8192", "--concurrency", "10"])
    assert rc == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["id"] for r in rows) == sorted(IDS)  # in category order
    for r in rows:
        assert r["mode"] == "bare" and r["model_sha256"].startswith(("sha256:", "sample:")) and r["commit"]
        assert r["result"] in ("pass", "fail") and (r["result"] == "pass" or r["reason"])
        assert r["requests"] >= 1 and len(r["latency_s"]) == r["requests"]
        assert all(t > 0 for t in r["prompt_tokens"])  # the server answered every request
    (mt,) = [r for r in rows if r["category"] == "multi_turn_base"]
    assert mt["requests"] >= 2 or mt["result"] == "fail"  # a pass needs both turns
    summary = json.loads(report.read_text())
    assert summary["meta"]["concurrency"] == 10
    assert set(summary["categories"]) == set(CATEGORIES)
    assert summary["overall"]["n"] == len(IDS)
    for cat in summary["categories"].values():
        lo, hi = cat["ci95"]
        assert 0 <= lo <= cat["accuracy"] <= hi <= 1
    assert summary["requests"] == sum(r["requests"] for r in rows)
    latencies = [x for r in rows for x in r["latency_s"]]
    assert min(latencies) <= summary["latency_s"]["mean"] <= max(latencies)
    assert min(latencies) <= summary["latency_s"]["p95"] <= max(latencies)
    text = capsys.readouterr().out
    assert "95% CI (Wilson)" in text and "valid calls:" in text

    again = tmp_path / "same.jsonl"
    again.write_text(out.read_text())
    assert main(["eval", "tools", "--compare", str(out), str(again)]) == 0
    assert "overall" in capsys.readouterr().out


def test_eval_tools_guard_mode_end_to_end(model_path, tmp_path, capsys):
    """`--mode guard`: the same items through the server's tool guard (lazy call grammar, validation,
    retries); every call the model made is a valid call of an offered tool."""
    out = tmp_path / "guard.jsonl"
    ids = ["simple_python_97", "parallel_7", "irrelevance_8"]
    assert main(["eval", "tools", str(model_path("qwen2.5-coder-0.5b")), "--mode", "guard", "--ids", ",".join(ids),
                 "--out", str(out), "--max-model-len", "8192", "--concurrency", "3"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["id"] for r in rows) == sorted(ids) and all(r["mode"] == "guard" for r in rows)
    for r in rows:
        assert r["result"] in ("pass", "fail") and all(t > 0 for t in r["prompt_tokens"])
        # the guard let no invalid call through unretried (a declined call is text on purpose)
        assert r["valid_calls"] == r["called"] or r["retries"] > 0 or r["declined"] > 0, r
    assert "95% CI (Wilson)" in capsys.readouterr().out
