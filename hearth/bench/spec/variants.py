"""What is measured: a variant is one engine with one speculative configuration, turned into the
command line that starts its server. Each engine is a row of ENGINES (its command builder); the
variant lists are JSON so that new proposers (suffix, trees) need no code here.

hearth variants: {"name": speculative_config or null}, the config passed as --speculative-config.
llama.cpp variants: {"name": [extra llama-server arguments]}. In both, the string "{draft}" stands
for the draft model's path, so both engines read the same GGUF files."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hearth.bench import BenchError

DRAFT = "{draft}"
CTX = 4096
"""Context of every server: the longest prompt (~450 tokens) plus max tokens, with room."""

DEFAULT_HEARTH: dict[str, dict | None] = {
    "plain": None,
    # K = 15: 16 rows are one pass of the exact AMX tiles (costing ~what 9 rows on the GEMV do);
    # in-process on the code edit (benchmarks/bench_spec_trace.py) 2.18x plain against K = 8's 2.03x
    "ngram": {"method": "ngram", "num_speculative_tokens": 15},
    "draft": {"method": "draft", "model": DRAFT, "num_speculative_tokens": 4},
    # the draft at Q4_0 with a 64k head: its step reads ~235 MB instead of 392 (docs/speculative.md)
    "draft-q4": {"method": "draft", "model": DRAFT, "num_speculative_tokens": 4, "draft_quant": "q4_0",
                 "draft_vocab": 65536},
    "draft-q4-tree": {"method": "draft", "model": DRAFT, "num_speculative_tokens": 4, "tree_budget": 8,
                      "draft_quant": "q4_0", "draft_vocab": 65536},
    "suffix": {"method": "suffix"},
}
# llama-server's own defaults for each type (draft n-max 3, ngram-mod n 48..64): what a user gets
DEFAULT_LLAMA: dict[str, list[str]] = {
    "plain": [],
    "draft-simple": ["--spec-type", "draft-simple", "-md", DRAFT],
    "ngram-simple": ["--spec-type", "ngram-simple"],
    "ngram-mod": ["--spec-type", "ngram-mod"],
    "ngram-cache": ["--spec-type", "ngram-cache"],
}
PLAIN = "plain"
"""The variant whose text is each engine's greedy reference."""


@dataclass(frozen=True, slots=True)
class Variant:
    engine: str
    name: str
    config: dict | list | None
    """hearth: the speculative_config (None = off); llama.cpp: extra server arguments."""

    @property
    def label(self) -> str:
        return f"{self.engine} {self.name}"

    @property
    def uses_draft(self) -> bool:
        return DRAFT in json.dumps(self.config)


@dataclass(frozen=True, slots=True)
class Launch:
    """What every server of a run shares."""

    model: Path
    draft: Path
    threads: int
    llama_server: Path
    python: str = sys.executable


def _fill(value, draft: Path):
    return json.loads(json.dumps(value).replace(DRAFT, str(draft).replace("\\", "\\\\")))


def hearth_command(v: Variant, launch: Launch, port: int) -> list[str]:
    cmd = [launch.python, "-m", "hearth", "serve", str(launch.model), "--port", str(port), "--host", "127.0.0.1",
           "--threads", str(launch.threads), "--max-num-seqs", "1", "--max-model-len", str(CTX),
           "--log-level", "warning"]
    if v.config is not None:
        cmd += ["--speculative-config", json.dumps(_fill(v.config, launch.draft))]
    return cmd


def llama_command(v: Variant, launch: Launch, port: int) -> list[str]:
    t = str(launch.threads)
    return [str(launch.llama_server), "-m", str(launch.model), "--host", "127.0.0.1", "--port", str(port),
            "-t", t, "-tb", t, "-td", t, "-tbd", t, "-c", str(CTX), "-np", "1", "--metrics", "--no-webui",
            *_fill(v.config, launch.draft)]


ENGINES: dict[str, Callable[[Variant, Launch, int], list[str]]] = {
    "hearth": hearth_command,
    "llama.cpp": llama_command,
}


def parse_variants(engine: str, text: str | None, default: dict, flag: str) -> list[Variant]:
    """`text`: JSON {"name": config}; None gives the defaults; "" or {} gives none of this engine."""
    if text is None:
        table = default
    else:
        try:
            table = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError as e:
            raise BenchError(f"{flag} is not valid JSON: {e.msg} (at {e.pos})") from None
        if not isinstance(table, dict):
            raise BenchError(f"{flag} must be a JSON object of name -> config, not {type(table).__name__}")
    want = (dict, type(None)) if engine == "hearth" else list
    for name, config in table.items():
        if not isinstance(config, want):
            shape = "a speculative_config object or null" if engine == "hearth" else "a list of arguments"
            raise BenchError(f"{flag}: {name!r} must be {shape}, not {json.dumps(config)}")
        if engine != "hearth" and not all(isinstance(a, str) for a in config):
            raise BenchError(f"{flag}: {name!r} must list strings, not {json.dumps(config)}")
    return [Variant(engine, name, config) for name, config in table.items()]


def select(variants: list[Variant], only: str | None) -> list[Variant]:
    """--only "hearth plain,llama.cpp ngram-mod": a subset by label, in the given order."""
    if not only:
        return variants
    by_label = {v.label: v for v in variants}
    picked = []
    for label in (s.strip() for s in only.split(",")):
        if label not in by_label:
            raise BenchError(f"--only: no variant {label!r}; known: {', '.join(by_label)}")
        picked.append(by_label[label])
    return picked
