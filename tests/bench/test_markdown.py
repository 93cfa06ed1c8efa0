"""The markdown report from recorded results: the machine line, medians over repeats, ratios to the
baseline, greedy agreement, the plan table, and `hearth bench --report` around it."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from hearth.bench import BenchError
from hearth.bench.markdown import machine_line, render_markdown
from hearth.cli import main
from tests.bench.recorded import MiB, compared, level, results
from tests.gguf_factory import write_tiny_gguf

# three repeats per engine; medians: llama.cpp 65 / 110 tok/s, hearth 130 / 220 tok/s (2.00x)
LLAMA = [(60, 100), (70, 120), (65, 110)]
HEARTH = [(130, 220), (100, 200), (140, 330)]
AGREEMENT = [(0.9, 0.5), (0.95, 0.5), (1.0, 1.0)]


def _runs() -> list[dict]:
    out = []
    for rep, ((l1, l8), (h1, h8), (agree, exact)) in enumerate(zip(LLAMA, HEARTH, AGREEMENT)):
        seed = 100 + rep
        out.append(results("llama.cpp", seed, [level(1, l1), level(8, l8)], load=[0.3, 1.7, 0.9][rep],
                           created=f"2026-11-29T1{rep}:00:00+00:00"))
        hearth = [level(1, h1, ttft=(0.1, 0.2), itl=(0.007, 0.021), decode=90.0, pct=55.5, rss=500 * MiB),
                  level(8, h8, ttft=(0.1, 0.2), itl=(0.007, 0.021), decode=90.0, pct=55.5, rss=500 * MiB,
                        failed=1 if rep == 0 else 0)]
        out.append(results("hearth", seed, hearth, quality=compared("concurrency-sweep", seed, agree, exact)))
    return out


def test_tables_medians_and_ratios():
    md = render_markdown(_runs())
    lines = md.splitlines()
    assert lines[0] == ("**Machine:** Xeon Test CPU, 2 cores, 2 threads per engine, 24.0 GiB memory, 18.3 GB/s "
                        "measured memory read bandwidth (`hearth plan`), Linux 6.1; 2026-11-29, "
                        "1-minute load average 0.3-1.7.")
    assert "Baseline: llama.cpp." in lines
    assert ("**concurrency-sweep**, SmolLM2.Q4_1.gguf: concurrency 1, 8; 2/16 requests per level of up to 32 "
            "output tokens each, greedy, EOS ignored; median of 3 run(s) (seed 100, 101, 102).") in lines
    table = [ln for ln in lines if ln.startswith("| ")]
    assert table == [
        "| concurrency | engine | output tok/s | TTFT p50 / p99 (s) | ITL p50 / p99 (ms) | tok/s per request (p50) "
        "| % of decode ceiling | peak RSS |",
        "| 1 | llama.cpp | 65.0 | 0.20 / 0.40 | 14 / 28 | 60.0 | 37% | 200.0 MiB |",
        "| 1 | hearth | 130.0 | 0.10 / 0.20 | 7.0 / 21 | 90.0 | 56% | 500.0 MiB |",
        "|  | *hearth / llama.cpp* | 2.00x | 0.50x / 0.50x | 0.50x / 0.75x | 1.50x | 1.50x | 2.50x |",
        "| 8 | llama.cpp | 110.0 | 0.20 / 0.40 | 14 / 28 | 60.0 | 37% | 200.0 MiB |",
        "| 8 | hearth (1 failed) | 220.0 | 0.10 / 0.20 | 7.0 / 21 | 90.0 | 56% | 500.0 MiB |",
        "|  | *hearth / llama.cpp* | 2.00x | 0.50x / 0.50x | 0.50x / 0.75x | 1.50x | 1.50x | 2.50x |",
    ]
    assert ("Greedy agreement, hearth with llama.cpp: 95.0% of words identical, 50% of outputs equal "
            "(median of 3 run(s)).") in lines
    assert lines[-1].startswith("output tok/s: every output token")


def test_baseline_can_be_chosen():
    md = render_markdown(_runs(), baseline="hearth")
    assert "|  | *llama.cpp / hearth* | 0.50x | 2.00x / 2.00x | 2.00x / 1.33x | 0.67x | 0.67x | 0.40x |" in md
    with pytest.raises(BenchError, match="--baseline 'vllm' is none of the targets: llama.cpp, hearth"):
        render_markdown(_runs(), baseline="vllm")


def test_one_target_has_no_ratios_and_workloads_get_a_table_each():
    runs = [results("hearth", 0, [level(1, 50)], workload="chat", max_tokens=64),
            results("hearth", 100, [level(1, 40), level(8, 90)])]
    md = render_markdown(runs)
    assert "Baseline" not in md and " / hearth*" not in md
    titles = [ln for ln in md.splitlines() if ln.startswith("**") and not ln.startswith("**Machine")]
    assert [t.split(",")[0] for t in titles] == ["**chat**", "**concurrency-sweep**"]


def test_a_level_one_target_lacks_gets_no_ratio():
    runs = [results("llama.cpp", 0, [level(1, 50)]), results("hearth", 0, [level(1, 60), level(8, 90)])]
    runs[1]["workload"]["concurrency"] = runs[0]["workload"]["concurrency"] = [1, 8]
    runs[1]["workload"]["requests"] = runs[0]["workload"]["requests"] = [2, 16]
    table = [ln for ln in render_markdown(runs).splitlines() if ln.startswith("| ")]
    assert [ln.split(" | ")[1] for ln in table[1:]] == ["llama.cpp", "hearth", "*hearth / llama.cpp*", "hearth"]


def test_missing_numbers_show_as_dashes():
    lv = level(1, 10.0)
    lv.update(ttft_s=None, decode_ceiling=None, peak_rss_bytes=None)
    row = [ln for ln in render_markdown([results("x", 0, [lv])]).splitlines() if ln.startswith("| 1 ")]
    assert row == ["| 1 | x | 10.0 | - / - | 14 / 28 | 60.0 | - | - |"]


def test_the_machine_is_stated_once_and_must_be_one():
    one = results("a", 0, [level(1, 1)])
    other = results("b", 0, [level(1, 1)], cpu="Apple M3 Max")
    with pytest.raises(BenchError, match=r"the results come from different machines \(Apple M3 Max, 2 cores; "
                                         r"Xeon Test CPU, 2 cores\); a report states one machine"):
        render_markdown([one, other])
    one["target"].update(bandwidth=None, threads=None)
    one["created"] = "2026-12-01T09:00:00+00:00"
    line = machine_line([one, results("a", 1, [level(1, 1)])])
    assert line == ("**Machine:** Xeon Test CPU, 2 cores, 2 threads per engine, 24.0 GiB memory, 18.3 GB/s measured "
                    "memory read bandwidth (`hearth plan`), Linux 6.1; 2026-11-29 to 2026-12-01, "
                    "1-minute load average 0.5.")
    preset = results("a", 0, [level(1, 1)])
    preset["target"].update(device="H200", bandwidth=4.8e12, threads=1)
    line = machine_line([preset])
    assert "1 thread per engine" in line and "ceilings for H200 (4,800.0 GB/s)" in line


@pytest.fixture(scope="module")
def plan_json(tmp_path_factory):
    path = tmp_path_factory.mktemp("plan") / "tiny.gguf"
    write_tiny_gguf(path, "llama", context=2048)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["plan", str(path), "--json", "--device", "h200", "--ctx", "256", "--concurrency", "4"]) == 0
    return json.loads(out.getvalue())


def test_plan_table_from_hearth_plan_json(plan_json):
    assert plan_json["inputs"]["model_arg"].endswith("tiny.gguf")
    md = render_markdown([results("hearth", 0, [level(1, 1)])], [plan_json])
    assert "Plan (`hearth plan MODEL --ctx C --concurrency N --json`):" in md
    [row] = [ln for ln in md.splitlines() if ln.startswith("| tiny.gguf ")]
    cells = row.strip("| ").split(" | ")
    assert cells[:2] == ["tiny.gguf", "256 x 4"] and cells[5] == "yes"
    assert cells[7] == (f"{plan_json['decode_tok_s_ceiling']:,.1f} tok/s / "
                        f"{plan_json['decode_tok_s_ceiling_aggregate']:,.1f} tok/s")


def test_report_command(tmp_path, plan_json, capsys):
    files = []
    for i, r in enumerate(_runs()):
        (tmp_path / f"run{i}").mkdir()
        files.append(tmp_path / f"run{i}" / "results.json")
        files[-1].write_text(json.dumps(r))
    (tmp_path / "plan.json").write_text(json.dumps(plan_json))
    expected = render_markdown(_runs(), [plan_json], "Engines: two.", "hearth")
    out = tmp_path / "section.md"
    argv = ["bench", "--report", *map(str, files[:-1]), str(files[-1].parent), "--plan", str(tmp_path / "plan.json"),
            "--note", "Engines: two.", "--baseline", "hearth"]
    assert main([*argv, "--markdown", str(out)]) == 0
    assert out.read_text() == expected and capsys.readouterr().out == ""
    assert main(argv) == 0
    assert capsys.readouterr().out == expected
