"""Files a report is made from, read back and checked: `hearth bench` results.json files and
`hearth plan --json` outputs. A file of the wrong kind is a one-line error naming it."""

from __future__ import annotations

import json
from pathlib import Path

from hearth.bench import BenchError
from hearth.bench.report import VERSION
from hearth.bench.session import RESULTS_JSON

PLAN_KEYS = ("inputs", "weight_bytes", "decode_tok_s_ceiling", "decode_tok_s_ceiling_aggregate", "bandwidth")


def _read(option: str, p: str | Path) -> object:
    try:
        return json.loads(Path(p).read_text())
    except FileNotFoundError:
        raise BenchError(f"{option} {p}: no such file") from None
    except (OSError, ValueError) as e:
        raise BenchError(f"{option} {p} cannot be read as JSON: {e}") from None


def load_results(paths: list[str]) -> list[dict]:
    """A path may be a results.json or the run's output folder."""
    if not paths:
        raise BenchError("--report needs at least one results.json")
    out = []
    for p in paths:
        path = Path(p) / RESULTS_JSON if Path(p).is_dir() else Path(p)
        data = _read("--report", path)
        if not isinstance(data, dict) or data.get("hearth_bench") != VERSION or "levels" not in data:
            raise BenchError(f"--report {path} is not a hearth bench {RESULTS_JSON}")
        out.append(data)
    return out


def load_plans(paths: list[str]) -> list[dict]:
    out = []
    for p in paths:
        data = _read("--plan", p)
        if not isinstance(data, dict) or any(k not in data for k in PLAN_KEYS):
            raise BenchError(f"--plan {p} is not the output of `hearth plan --json`")
        out.append(data)
    return out
