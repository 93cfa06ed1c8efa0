"""hearth's own request extensions: the `hearth` object of a request body (clients put vendor
fields there: `{"hearth": {"tool_guard": "off"}}`). Each key is checked here, so a bad value is a
400 that names it (`hearth.tool_guard`). Later keys (workflow, compaction) add a field and a check."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from hearth.api.errors import APIError
from hearth.tool_guard import MODES, GuardConfig


@dataclass(frozen=True, slots=True)
class Extensions:
    tool_guard: GuardConfig


def parse_extensions(raw: Any, server_guard: GuardConfig) -> Extensions:
    if raw is None:
        return Extensions(server_guard)
    if not isinstance(raw, dict):
        raise _bad("hearth", f"must be an object, not {type(raw).__name__}")
    guard = server_guard
    mode = raw.get("tool_guard")
    if mode is not None:
        if mode not in MODES:
            raise _bad("hearth.tool_guard", f"unknown mode {mode!r}; modes: {', '.join(MODES)}")
        guard = replace(guard, mode=mode)
    retries = raw.get("tool_guard_retries")
    if retries is not None:
        if not isinstance(retries, int) or isinstance(retries, bool) or not 0 <= retries <= 10:
            raise _bad("hearth.tool_guard_retries", f"must be an integer in [0, 10], got {retries!r}")
        guard = replace(guard, max_retries=retries)
    return Extensions(guard)


def _bad(param: str, why: str) -> APIError:
    return APIError(400, f"{param}: {why}", param=param)
