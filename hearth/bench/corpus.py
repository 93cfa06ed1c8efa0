"""The text that workloads are built from, shipped in hearth/data/bench (see SOURCES.md there)."""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files


def _data(*parts: str):
    return files("hearth").joinpath("data", "bench", *parts)


@cache
def chat() -> dict:
    """system_prompts, questions, conversations (lists of {role, content} ending on a user turn)."""
    return json.loads(_data("chat.json").read_text(encoding="utf-8"))


@cache
def paragraphs() -> tuple[str, ...]:
    text = _data("prose.txt").read_text(encoding="utf-8")
    return tuple(p.strip() for p in text.split("\n\n") if p.strip())


@cache
def code_edits() -> dict[str, tuple[str, ...]]:
    """Code file name -> edit instructions for it."""
    edits = json.loads(_data("code_edits.json").read_text(encoding="utf-8"))["edits"]
    return {name: tuple(items) for name, items in edits.items()}


@cache
def code_file(name: str) -> str:
    return _data("code", name).read_text(encoding="utf-8")


@cache
def speculative() -> dict[str, dict]:
    """Workload name -> its fixed prompt (system, user or file + instruction) for bench_spec.py."""
    return json.loads(_data("speculative.json").read_text(encoding="utf-8"))["workloads"]
