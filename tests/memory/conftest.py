"""Fixtures for the planner tests: each real GGUF opened once per session (parsing gemma3's
262K-token vocabulary takes the gguf package seconds)."""

from __future__ import annotations

import pytest

from hearth.loader.gguf_loader import GGUFFile


@pytest.fixture(scope="session")
def real_gguf(model_path):
    opened: dict[str, GGUFFile] = {}

    def get(name: str) -> GGUFFile:
        if name not in opened:
            opened[name] = GGUFFile(model_path(name))
        return opened[name]

    return get


@pytest.fixture(scope="session")
def plan_home(tmp_path_factory):
    """A HEARTH_HOME for the planner's cache of this machine's measurement, measured at most once."""
    return tmp_path_factory.mktemp("plan_home")
