"""One `hearth bench` run from settings to files: checks what can be checked before anything loads,
runs the workload on a client, then writes results.json, reference.json and the charts."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from hearth.bench import BenchError
from hearth.bench.ceiling import level_ceiling
from hearth.bench.charts import write_charts
from hearth.bench.harness import run_workload
from hearth.bench.metrics.levels import level_summary
from hearth.bench.quality import agreement, load_reference, reference_of, write_json
from hearth.bench.records import LevelRun
from hearth.bench.report import build_results
from hearth.bench.workloads import Workload, build_workload

RESULTS_JSON = "results.json"
REFERENCE_JSON = "reference.json"


@dataclass(slots=True)
class BenchSetup:
    workload: Workload
    folder: Path
    reference_path: Path | None
    reference: dict | None
    """The earlier run's outputs; None when there is none yet (this run writes it)."""
    progress: bool = True
    warmup: int = 1
    """Untimed requests before the first level."""


def output_folder(path: str | None) -> Path:
    if path is None:
        return Path("bench-results") / datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise BenchError(f"--output {folder} is a file; give a folder")
    return folder


def bench_setup(workload: str, seed: int = 0, requests: int | None = None, concurrency: int | None = None,
                max_tokens: int | None = None, output: str | None = None, reference: str | None = None,
                progress: bool = True, warmup: int = 1, levels: list[int] | None = None) -> BenchSetup:
    w = build_workload(workload, seed, requests, concurrency, max_tokens, levels)
    if warmup < 0:
        raise BenchError(f"--warmup must be 0 or more, got {warmup}")
    ref_path = Path(reference) if reference else None
    ref = load_reference(ref_path, w) if ref_path else None
    return BenchSetup(w, output_folder(output), ref_path, ref, progress, warmup)


def _quality(setup: BenchSetup, own: dict, runs: list[LevelRun]) -> dict:
    if setup.reference is not None:
        return {"status": "compared with", "reference": str(setup.reference_path),
                **agreement(setup.reference, runs)}
    path = setup.reference_path or setup.folder / REFERENCE_JSON
    if setup.reference_path is not None:
        write_json(setup.reference_path, own, indent=None)
    return {"status": "reference written to", "reference": str(path), "agreement": None}


def _request_rows(runs: list[LevelRun]) -> list[dict]:
    return [{"concurrency": r.concurrency, "index": r.index, "prompt_tokens": r.prompt_tokens,
             "output_tokens": r.output_tokens, "ttft_s": r.ttft, "latency_s": r.latency,
             "decode_tok_s": r.decode_tok_s, "finish_reason": r.finish_reason, "error": r.error}
            for run in runs for r in run.results]


def run_bench(setup: BenchSetup, client, roof, target: dict, memory=None) -> tuple[dict, list[Path], str | None]:
    """-> (results, files written, a note on skipped charts or None). roof: a Roofline or None;
    memory: a hearth.bench.rss.MemoryProbe of the measured process, or None."""
    runs = run_workload(client, setup.workload, setup.progress, setup.warmup, memory)
    levels = [level_summary(run) for run in runs]
    for lv in levels:
        lv["decode_ceiling"] = level_ceiling(roof, lv) if roof is not None else None
    own = reference_of(setup.workload, runs)
    try:
        write_json(setup.folder / REFERENCE_JSON, own, indent=None)
        quality = _quality(setup, own, runs)
        peak = memory.run_peak([run.peak_rss for run in runs]) if memory is not None else None
        results = build_results(setup.workload, client.mode, target, levels, quality, peak,
                                memory.per_level if memory is not None else None)
        results["requests"] = _request_rows(runs)
        write_json(setup.folder / RESULTS_JSON, results)
    except OSError as e:
        raise BenchError(f"cannot write results to {setup.folder}: {e.strerror or e}") from None
    title = f"{setup.workload.name}: {target.get('model') or target.get('served_model')}"
    charts, note = write_charts(levels, runs, title, setup.folder)
    return results, [setup.folder / RESULTS_JSON, setup.folder / REFERENCE_JSON, *charts], note
