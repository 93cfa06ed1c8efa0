"""One `hearth bench` run from settings to files: checks what can be checked before anything loads,
runs the workload on a client, then writes results.json, reference.json and the charts."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass, replace
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
from hearth.errors import HearthError
from hearth.memory.devices import Device
from hearth.memory.roofline import Roofline
from hearth.memory.units import rate

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


def run_bench(setup: BenchSetup, client, roof, target: dict, memory=None,
              remeasure: Callable[[], Device] | None = None) -> tuple[dict, list[Path], str | None]:
    """-> (results, files written, notes for the user (lines) or None). roof: a Roofline or None;
    memory: a hearth.bench.rss.MemoryProbe of the measured process, or None; remeasure: this machine
    measured again (hearth.memory.this_machine keeps the better figures), where roof's device is it."""
    runs = run_workload(client, setup.workload, setup.progress, setup.warmup, memory)
    levels = [level_summary(run) for run in runs]
    for lv in levels:
        lv["decode_ceiling"] = level_ceiling(roof, lv) if roof is not None else None
    notes = []
    if roof is not None and remeasure is not None and _above_ceiling(levels):
        roof, note = _remeasured(roof, levels, remeasure)
        target["bandwidth"] = roof.device.bandwidth
        notes.append(note)
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
    notes += [note] if note else []
    return results, [setup.folder / RESULTS_JSON, setup.folder / REFERENCE_JSON, *charts], "\n".join(notes) or None


def _above_ceiling(levels: list[dict]) -> float | None:
    """The highest % of its decode ceiling a level ran at, where one beat it."""
    pcts = [(lv["decode_ceiling"] or {}).get("pct") or 0 for lv in levels]
    return max(pcts) if max(pcts, default=0) > 100 else None


def _remeasured(roof: Roofline, levels: list[dict], remeasure: Callable[[], Device]) -> tuple[Roofline, str]:
    """A decode faster than the bandwidth allows: the cached figure was measured low (a busy
    machine only ever measures low), so measure again and recompute the ceilings with it; a measurement
    that fails keeps the cached ceilings and the note says why."""
    pct, old = _above_ceiling(levels), roof.device.bandwidth
    said = (f"hearth: decode ran at {pct:.0f}% of the ceiling from this machine's cached bandwidth "
            f"({rate(old)}); ")
    try:
        device = remeasure()
    except HearthError as e:  # a busy machine times out (PlanError): the run's results still get written
        return roof, said + f"could not measure again: {e}"
    roof = replace(roof, device=device)
    for lv in levels:
        lv["decode_ceiling"] = level_ceiling(roof, lv)
    now = _above_ceiling(levels)
    return roof, (said + f"measured it again: {rate(roof.device.bandwidth)}"
                  + (f", still {now:.0f}% (a model that fits the CPU cache reads faster than memory)" if now else ""))
