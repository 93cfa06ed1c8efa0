"""Shared fixtures.

`model_path(name)` gives the local .gguf of a catalog model (or any name resolve_model accepts),
downloading it once into $HEARTH_HOME (default ~/.cache/hearth) so later runs reuse it."""

from __future__ import annotations

from pathlib import Path

import pytest

from hearth.loader.resolve import resolve_model
from hearth.loader.store import hearth_home


@pytest.fixture(scope="session")
def model_path():
    # read HEARTH_HOME once, at session start, so a test that points it at a temp dir
    # (monkeypatch) cannot make this cache hand out paths that are later deleted
    home = hearth_home()
    cache: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in cache:
            cache[name] = resolve_model(name, home=home)
        return cache[name]

    return get


@pytest.fixture(scope="session")
def smol_llm(model_path):
    """One SmolLM2-135M engine shared by the tests that only add requests to it."""
    from hearth import LLM

    return LLM(str(model_path("smollm2-135m")), progress=False, max_model_len=2048)
