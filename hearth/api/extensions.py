"""hearth's own request extensions: the `hearth` object of a request body (clients put vendor
fields there: `{"hearth": {"tool_guard": "off"}}`). Each key is checked here, once per request, so a
bad value is a 400 that names it (`hearth.tool_guard`, `hearth.workflow.required[1]`).

Keys: tool_guard (the mode), tool_guard_retries, tool_guard_decline_below, tool_guard_parallel_hint
(GuardConfig), workflow (hearth.tool_guard.workflow), compaction (hearth.tool_guard.compaction), max_tools (hearth.tool_guard.tool_rank), router (a small model's
name, or false), router_threshold and router_tool_floor (hearth.tool_guard.routing)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from hearth.api.errors import APIError
from hearth.tool_guard import MODES, GuardConfig
from hearth.tool_guard.compaction import Compaction, parse_compaction
from hearth.tool_guard.modes import decline_below_error
from hearth.tool_guard.request_fields import FieldError, check_keys, int_field, kind
from hearth.tool_guard.routing import RouterError, check_threshold
from hearth.tool_guard.tool_rank import DEFAULT_MAX_TOOLS
from hearth.tool_guard.workflow import Workflow, parse_workflow

KEYS = ("tool_guard", "tool_guard_retries", "tool_guard_decline_below", "tool_guard_parallel_hint", "workflow",
        "compaction", "max_tools", "router", "router_threshold", "router_tool_floor")


@dataclass(frozen=True, slots=True)
class Extensions:
    tool_guard: GuardConfig
    workflow: Workflow | None = None
    compaction: Compaction | None = None
    max_tools: int | None = None
    """Above this many offered tools only this many (the most relevant) are rendered and allowed;
    None: DEFAULT_MAX_TOOLS in guard mode, no ranking in the others."""
    router: str | bool | None = None
    """A small model's name to route tool calls through, False for none; None: the server's choice."""
    router_threshold: float | None = None
    router_tool_floor: float | None = None
    """The router's floor on the small model's choice of tool (0: off); None: the server's."""

    @property
    def automatic(self) -> bool:
        """The guard's automatic parts (rescue, the default tool cap) act only in mode guard; the
        request's own opt-ins (workflow, compaction, an explicit max_tools) act in every mode."""
        return self.tool_guard.mode == "guard"

    @property
    def tool_cap(self) -> int | None:
        return self.max_tools if self.max_tools is not None else DEFAULT_MAX_TOOLS if self.automatic else None


def parse_extensions(raw: Any, server_guard: GuardConfig, tool_names: list[str] | None = None) -> Extensions:
    """`tool_names`: the request's tools (a workflow may name only those)."""
    if raw is None:
        return Extensions(server_guard)
    try:
        return _parse(raw, server_guard, tool_names or [])
    except FieldError as e:
        raise _bad(e.param, e.why) from None


def _parse(raw: Any, server_guard: GuardConfig, tool_names: list[str]) -> Extensions:
    check_keys(raw, KEYS, "hearth")
    guard = server_guard
    mode = raw.get("tool_guard")
    if mode is not None:
        if mode not in MODES:
            raise FieldError("hearth.tool_guard", f"unknown mode {mode!r}; modes: {', '.join(MODES)}")
        guard = replace(guard, mode=mode)
    if raw.get("tool_guard_retries") is not None:
        guard = replace(guard, max_retries=int_field(raw, "tool_guard_retries", 0, "hearth", low=0, high=10))
    below = raw.get("tool_guard_decline_below")
    if below is not None:
        if (why := decline_below_error(below)) is not None:
            raise FieldError("hearth.tool_guard_decline_below", why)
        guard = replace(guard, decline_below=float(below))
    hint = raw.get("tool_guard_parallel_hint")
    if hint is not None:
        if not isinstance(hint, bool):
            raise FieldError("hearth.tool_guard_parallel_hint", f"must be true or false, not {kind(hint)}")
        guard = replace(guard, parallel_hint=hint)
    workflow = raw.get("workflow")
    if workflow is not None and not tool_names:
        raise FieldError("hearth.workflow", "needs tools: the request offers none")
    return Extensions(guard,
                      parse_workflow(workflow, tool_names, "hearth.workflow") if workflow is not None else None,
                      parse_compaction(raw["compaction"], "hearth.compaction") if "compaction" in raw else None,
                      int_field(raw, "max_tools", 1, "hearth", low=1) if "max_tools" in raw else None,
                      *_router(raw))


def _router(raw: dict) -> tuple[str | bool | None, float | None, float | None]:
    router = raw.get("router")
    if router is not None and router is not False and not (isinstance(router, str) and router):
        raise FieldError("hearth.router", f"must be a model's name or false, not {kind(router)}")
    return router, _unit(raw, "router_threshold"), _unit(raw, "router_tool_floor")


def _unit(raw: dict, key: str) -> float | None:
    """A number in [0, 1], or None when not given."""
    value = raw.get(key)
    if value is None:
        return None
    try:
        return check_threshold(value, f"hearth.{key}")
    except RouterError:
        raise FieldError(f"hearth.{key}", f"must be a number in [0, 1], got {value!r}") from None


def _bad(param: str, why: str) -> APIError:
    return APIError(400, f"{param}: {why}", param=param)
