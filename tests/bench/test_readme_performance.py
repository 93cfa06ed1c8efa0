"""benchmarks/readme_performance.py without real engines: its dry run (what it would start and
measure), its early one-line errors, and one whole run against two fake OpenAI servers started as
processes, through `hearth plan`, `hearth bench --url`, the report and the README markers."""

from __future__ import annotations

import importlib.util
import json
import shlex
import sys
from pathlib import Path

import pytest

from hearth.bench import BenchError
from hearth.bench.http_client import HttpClient
from hearth.bench.readme_section import BEGIN, END
from tests.gguf_factory import write_tiny_gguf

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def script(monkeypatch):
    spec = importlib.util.spec_from_file_location("readme_performance", ROOT / "benchmarks" / "readme_performance.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("readme-perf") / "tiny.gguf"
    write_tiny_gguf(path, "llama", context=2048)
    return path


def _common(tiny, out) -> list[str]:
    return ["--model", str(tiny), "--plan-models", str(tiny), "--device", "h200", "--out", str(out)]


def test_dry_run_prints_the_plan_the_servers_and_interleaved_benches(script, tiny, tmp_path, capsys):
    assert script.main([*_common(tiny, tmp_path / "out"), "--dry-run", "--llama-server", "/nowhere/llama-server"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert not (tmp_path / "out").exists()  # a dry run writes nothing
    assert lines[0] == f"hearth plan {tiny} --json --ctx 1024 --concurrency 32 --device h200"
    llama, hearth = lines[1], lines[2]
    assert llama.startswith(f"/nowhere/llama-server -m {tiny} --port <port> -t 2 -tb 2 -np 32 -c 32768 -cb")
    assert f" -m hearth serve {tiny} --port <port> --threads 2 --max-num-seqs 32 --max-model-len 1024" in hearth
    benches = [shlex.split(line)[1:] for line in lines[3:-1]]
    assert len(benches) == 2 * 3 * 2  # workloads x repeats x engines
    labels = [argv[argv.index("--label") + 1] for argv in benches]
    assert labels == ["llama.cpp", "hearth"] * 6  # interleaved, the baseline first
    seeds = [int(argv[argv.index("--seed") + 1]) for argv in benches]
    assert seeds == [0, 0, 1, 1, 2, 2, 100, 100, 101, 101, 102, 102]
    for a, b in zip(benches[::2], benches[1::2]):  # each pair: the same workload, seed and reference
        differs = {i for i, (x, y) in enumerate(zip(a, b)) if x != y}
        assert {a[i - 1] for i in differs} == {"--url", "--label", "--server-pid", "--output"}
    assert benches[0][-8:] == ["--workload", "chat", "--concurrency", "1", "--requests", "4", "--max-tokens", "64"]
    assert benches[-1][-6:] == ["--workload", "concurrency-sweep", "--levels", "1,8,32", "--max-tokens", "32"]
    assert all("--ignore-eos" in argv and argv[argv.index("--threads") + 1] == "2" for argv in benches)
    assert lines[-1].startswith("hearth bench --report ") and "--baseline llama.cpp" in lines[-1]


@pytest.mark.parametrize("argv, message", [
    (["--repeats", "0"], "--repeats must be at least 1, got 0"),
    (["--sweep", "1,x"], "--sweep must be comma-separated numbers of 1 or more such as 1,8,32, got '1,x'"),
    (["--sweep", "0,8"], "--sweep must be comma-separated numbers of 1 or more such as 1,8,32, got '0,8'"),
    (["--llama-server", "/nowhere/llama-server"],
     "/nowhere/llama-server is missing: run benchmarks/setup_llama_server.sh"),
    (["--model", "/nowhere/model.gguf", "--llama-server", sys.executable], "/nowhere/model.gguf"),
])
def test_bad_input_is_one_line_before_anything_runs(script, tiny, tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.setattr(script, "SERVERS", {})  # nothing may start
    assert script.main([*_common(tiny, tmp_path / "out"), *argv]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("readme_performance: error: ") and message in err
    assert not (tmp_path / "out").exists()


def test_missing_readme_markers_fail_before_measuring(script, tiny, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(script, "SERVERS", {})
    readme = tmp_path / "README.md"
    readme.write_text("# hearth\n\n## Performance\n\nhand-written\n")
    code = script.main([*_common(tiny, tmp_path / "out"), "--llama-server", sys.executable,
                        "--write-readme", str(readme)])
    err = capsys.readouterr().err.strip()
    assert code == 1 and err == (f"readme_performance: error: {readme} has no {BEGIN} marker; it needs exactly one "
                                 f"{BEGIN} and one {END} around the section to replace")
    assert readme.read_text() == "# hearth\n\n## Performance\n\nhand-written\n" and not (tmp_path / "out").exists()


def _fake(script, label: str, gap: float):
    def command(args, gguf, port):
        return [sys.executable, "-m", "tests.bench.fake_openai", "--port", str(port), "--gap", str(gap),
                "-m", str(gguf)]
    return script.Engine(command, lambda args: f"fake {label} 1.0")


def test_whole_run_against_fake_servers(script, tiny, tmp_path, capsys, monkeypatch):
    # two fakes 10x apart in token gaps, so the report has something to compare
    monkeypatch.setattr(script, "SERVERS", {"llama.cpp": _fake(script, "llama.cpp", 0.05),
                                            "hearth": _fake(script, "hearth", 0.005)})
    readme = tmp_path / "README.md"
    readme.write_text(f"# hearth\n\n## Performance\n\n{BEGIN}\nold\n{END}\n\n## Next\n")
    out = tmp_path / "out"
    argv = [*_common(tiny, out), "--llama-server", sys.executable, "--repeats", "1", "--chat-requests", "1",
            "--chat-tokens", "4", "--sweep", "1,2", "--sweep-tokens", "4", "--write-readme", str(readme)]
    assert script.main(argv) == 0
    section = (out / "perf_section.md").read_text()
    assert section in capsys.readouterr().out
    assert readme.read_text() == f"# hearth\n\n## Performance\n\n{BEGIN}\n{section}{END}\n\n## Next\n"

    lines = section.splitlines()
    assert lines[0].startswith("**Machine:** ") and "2 threads per engine" in lines[0] and "H200" in lines[0]
    assert lines[2].startswith("Engines: llama.cpp (fake llama.cpp 1.0): `") and "hearth (fake hearth 1.0)" in lines[2]
    assert "--port" not in lines[2] and " -m tiny.gguf" in lines[2]
    assert any(ln.startswith("| tiny.gguf | 1,024 x 2 |") for ln in lines)  # the plan row
    assert sum(ln.startswith("| 1 | llama.cpp | ") for ln in lines) == 2  # chat, and the sweep's first level
    assert sum(ln.startswith("| 2 | hearth | ") for ln in lines) == 1
    ratios = [i for i, ln in enumerate(lines) if "*hearth / llama.cpp*" in ln]
    assert len(ratios) == 3  # chat c=1, sweep c=1 and c=2
    for i in ratios:  # each ratio is its level's hearth row over its llama.cpp row (no timing asserted)
        base, target = (float(lines[j].split(" | ")[2]) for j in (i - 2, i - 1))
        assert lines[i - 2].split(" | ")[1] == "llama.cpp" and lines[i - 1].split(" | ")[1] == "hearth"
        assert abs(float(lines[i].split(" | ")[2].rstrip("x")) - target / base) <= 0.01 * target / base + 0.01
    assert sum("Greedy agreement, hearth with llama.cpp: 100.0% of words identical" in ln for ln in lines) == 2

    # each server's peak RSS was read per level; both servers are gone
    for label in ("llama.cpp", "hearth"):
        results = json.loads((out / "runs" / "sweep" / "seed100" / label / "results.json").read_text())
        assert results["target"]["label"] == label and results["peak_rss_per_level"] is True
        assert all(lv["peak_rss_bytes"] > 2**20 for lv in results["levels"])
        with pytest.raises(BenchError, match="cannot reach"):
            HttpClient(results["target"]["url"]).discover()
