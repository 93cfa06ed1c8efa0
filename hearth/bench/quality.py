"""Quality consistency: greedy outputs compared with a reference run's, prompt by prompt.

A reference file holds one output per prompt index and the settings that make outputs comparable.
Agreement is positional: identical tokens (or words, when either side has no token ids, as over
HTTP) over the longer output's length — greedy runs that diverge once usually differ from there
on, and this counts that."""

from __future__ import annotations

import json
from pathlib import Path

from hearth.bench import BenchError
from hearth.bench.records import LevelRun, RequestResult
from hearth.bench.workloads import Workload

VERSION = 1
MATCH_KEYS = ("workload", "seed", "max_tokens")


def reference_of(workload: Workload, runs: list[LevelRun]) -> dict:
    outputs: dict[str, dict] = {}
    for run in runs:
        for r in run.results:
            if r.ok and str(r.index) not in outputs:
                outputs[str(r.index)] = {"prompt_sha": r.prompt_sha, "text": r.text, "token_ids": r.token_ids}
    return {"hearth_bench_reference": VERSION, "workload": workload.name, "seed": workload.seed,
            "max_tokens": workload.max_tokens, "outputs": outputs}


def load_reference(path: Path, workload: Workload) -> dict | None:
    """None when the file does not exist yet (this run will write it); a one-line error when it
    is not a reference or was made with settings whose outputs are not comparable."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise BenchError(f"--reference {path} cannot be read as JSON: {e}") from None
    if not isinstance(data, dict) or data.get("hearth_bench_reference") != VERSION:
        raise BenchError(f"--reference {path} is not a hearth bench reference (a run writes reference.json)")
    ours = {"workload": workload.name, "seed": workload.seed, "max_tokens": workload.max_tokens}
    for key in MATCH_KEYS:
        if data.get(key) != ours[key]:
            raise BenchError(f"--reference {path} was made with {key} {data.get(key)!r}, this run has {ours[key]!r}; "
                             "outputs are only comparable with the same workload, seed and max tokens")
    return data


def _score(pairs: list[tuple[dict, RequestResult]], use_ids: bool) -> dict:
    matched = total = exact = 0
    for ref, r in pairs:
        a, b = (ref["token_ids"], r.token_ids) if use_ids else (ref["text"].split(), r.text.split())
        matched += sum(x == y for x, y in zip(a, b))
        total += max(len(a), len(b))
        exact += ref["text"] == r.text
    return {"compared": len(pairs), "agreement": matched / total if total else 1.0,
            "exact_match": exact / len(pairs) if pairs else None}


def agreement(reference: dict, runs: list[LevelRun]) -> dict:
    outputs = reference["outputs"]
    pairs = [(outputs[str(r.index)], r) for run in runs for r in run.results
             if r.ok and str(r.index) in outputs and outputs[str(r.index)]["prompt_sha"] == r.prompt_sha]
    if not pairs:
        return {"unit": None, "compared": 0, "agreement": None, "exact_match": None, "by_concurrency": {}}
    use_ids = all(ref.get("token_ids") is not None and r.token_ids is not None for ref, r in pairs)
    levels = sorted({r.concurrency for _, r in pairs})
    return {"unit": "tokens" if use_ids else "words", **_score(pairs, use_ids),
            "by_concurrency": {str(c): _score([p for p in pairs if p[1].concurrency == c], use_ids)
                               for c in levels}}


def write_json(path: Path, data: dict, indent: int | None = 1) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=indent, ensure_ascii=False))
