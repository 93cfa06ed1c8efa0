"""`hearth bench` in-process on a tiny random model: the whole path from CLI to results.json,
reference.json and the PNG charts, then a second run checked against the first's reference."""

from __future__ import annotations

import json

import pytest

from hearth.cli import main
from tests.gguf_factory import write_tiny_gguf

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench-model") / "tiny.gguf"
    write_tiny_gguf(path, "llama", context=2048)  # room for chat prompts in its byte-level vocabulary
    return path


def _bench(tiny, out, *extra):
    # a datasheet device: the ceiling without measuring this machine
    return main(["bench", "--model", str(tiny), "--workload", "concurrency-sweep", "--concurrency", "2",
                 "--requests", "2", "--max-tokens", "4", "--ignore-eos", "--ctx", "2048", "--threads", "1",
                 "--device", "h200", "--output", str(out), *extra])


def test_sweep_writes_results_reference_and_charts(tiny, tmp_path, capsys):
    ref = tmp_path / "ref.json"
    assert _bench(tiny, tmp_path / "one", "--reference", str(ref)) == 0
    out = capsys.readouterr().out
    assert "hearth bench  concurrency-sweep" in out and "% ceiling" in out and "peak RSS" in out

    results = json.loads((tmp_path / "one" / "results.json").read_text())
    assert results["mode"] == "local" and results["target"]["device"] == "H200"
    assert results["workload"]["concurrency"] == [1, 2] and results["workload"]["sampling"] == "greedy"
    for level in results["levels"]:
        assert (level["requests"], level["failed"], level["output_tokens"]) == (2, 0, 8)
        assert level["prompt_tokens"] > 0 and level["output_tok_s"] > 0
        assert level["ttft_s"]["p50"] > 0 and level["itl_s"]["n"] == 6 and level["decode_tok_s"]["p99"] > 0
        ceiling = level["decode_ceiling"]
        assert ceiling["tok_s_aggregate"] > 0 and ceiling["pct"] > 0 and "H200" in ceiling["reason"]
    assert results["peak_rss_bytes"] > 50 * 2**20
    assert results["peak_rss_per_level"] is True  # Linux: each level's own peak
    assert all(50 * 2**20 < lv["peak_rss_bytes"] <= results["peak_rss_bytes"] for lv in results["levels"])
    report = (tmp_path / "one" / "report.md").read_text()
    assert report.startswith("**Machine:** ") and "| 2 | hearth (in-process) |" in report
    assert "acceptance_length" in results and results["acceptance_length"] is None
    assert len(results["requests"]) == 4

    quality = results["quality"]
    assert quality["status"] == "reference written to" and ref.exists()
    saved = json.loads(ref.read_text())
    assert saved == json.loads((tmp_path / "one" / "reference.json").read_text())
    assert all(len(o["token_ids"]) == 4 for o in saved["outputs"].values())
    for png in ("throughput_vs_concurrency.png", "latency.png"):
        assert (tmp_path / "one" / png).read_bytes()[:8] == PNG

    # greedy, same prompts: the same tokens again
    assert _bench(tiny, tmp_path / "two", "--reference", str(ref)) == 0
    quality = json.loads((tmp_path / "two" / "results.json").read_text())["quality"]
    assert quality["status"] == "compared with" and quality["unit"] == "tokens"
    assert quality["compared"] == 4 and quality["agreement"] == 1.0 and quality["exact_match"] == 1.0
    assert "100.0% of tokens identical" in capsys.readouterr().out


def test_prompt_too_long_for_the_context(tiny, tmp_path, capsys):
    code = main(["bench", "--model", str(tiny), "--ctx", "64", "--requests", "1", "--threads", "1",
                 "--device", "h200", "--output", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and err[-1].startswith("hearth: error: chat prompt 0 is ") and "raise --ctx" in err[-1]


@pytest.mark.parametrize("cached_bandwidth,remeasured", [(1e3, True), (1e15, False)])
def test_a_ceiling_the_run_beats_is_measured_again(tiny, tmp_path, capsys, monkeypatch, cached_bandwidth, remeasured):
    """A cached bandwidth measured while the machine was busy gave '% ceiling 206%': a decode faster
    than the ceiling remeasures this machine (the better figure kept) and says so in one line."""
    from hearth.memory import this_machine
    from hearth.memory.units import rate

    home = tmp_path / "home"
    (home / this_machine.CACHE).parent.mkdir(parents=True)
    (home / this_machine.CACHE).write_text(json.dumps({
        "key": this_machine.machine_key(), "kind": "cpu", "runtime_bytes": 1, "bandwidth": cached_bandwidth,
        "peak_flops": 1e12}))
    monkeypatch.setenv("HEARTH_HOME", str(home))
    measured = []
    monkeypatch.setattr(this_machine, "_run_measurement", lambda: measured.append(1) or {
        "kind": "cpu", "runtime_bytes": 1, "bandwidth": 1e14, "peak_flops": 1e11})  # fake: no 2 s measurement
    assert _bench(tiny, tmp_path / "out", "--device", "this") == 0
    out, err = capsys.readouterr()
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    pcts = [lv["decode_ceiling"]["pct"] for lv in results["levels"]]
    assert all(0 < p < 100 for p in pcts), pcts
    assert len(measured) == remeasured
    notes = [line for line in err.splitlines() if "measured it again" in line]
    if remeasured:
        assert len(notes) == 1 and f"cached bandwidth ({rate(cached_bandwidth)})" in notes[0], err
        assert notes[0].startswith("hearth: decode ran at ") and notes[0].endswith(f"again: {rate(1e14)}")
        assert results["target"]["bandwidth"] == 1e14
        cached = json.loads((home / this_machine.CACHE).read_text())
        assert cached["bandwidth"] == 1e14 and cached["peak_flops"] == 1e12  # the better of both runs
    else:
        assert not notes and results["target"]["bandwidth"] == 1e15


def test_a_remeasure_that_fails_keeps_the_runs_results(tiny, tmp_path, capsys, monkeypatch):
    """Measuring again can time out on a busy machine after the whole run: the results are still
    written, with the cached ceilings, and the note says why they were not measured again."""
    from hearth.errors import PlanError
    from hearth.memory import this_machine

    home = tmp_path / "home"
    (home / this_machine.CACHE).parent.mkdir(parents=True)
    (home / this_machine.CACHE).write_text(json.dumps({
        "key": this_machine.machine_key(), "kind": "cpu", "runtime_bytes": 1, "bandwidth": 1e3, "peak_flops": 1e12}))
    monkeypatch.setenv("HEARTH_HOME", str(home))

    def busy():
        raise PlanError("measuring this machine took over 300 s (is it busy?)")

    monkeypatch.setattr(this_machine, "_run_measurement", busy)
    assert _bench(tiny, tmp_path / "out", "--device", "this") == 0
    err = capsys.readouterr().err
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["target"]["bandwidth"] == 1e3 and all(lv["decode_ceiling"]["pct"] > 100 for lv in results["levels"])
    (note,) = [line for line in err.splitlines() if "could not measure again" in line]
    assert note.startswith("hearth: decode ran at ") and note.endswith("could not measure again: measuring this "
                                                                       "machine took over 300 s (is it busy?)")
