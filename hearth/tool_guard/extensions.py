"""The `hearth` request extension object -> the options of this package's parts, checked: unknown
keys and wrong types are a FieldError naming the field. `tool_guard` is read by the guard's core
(the mode switch); it is listed here so that it is not an unknown key."""

from __future__ import annotations

from dataclasses import dataclass

from hearth.tool_guard.compaction import Compaction, parse_compaction
from hearth.tool_guard.request_fields import FieldError, check_keys, int_field
from hearth.tool_guard.tool_rank import DEFAULT_MAX_TOOLS
from hearth.tool_guard.workflow import Workflow, parse_workflow

KEYS = ("tool_guard", "workflow", "compaction", "max_tools")


@dataclass(frozen=True, slots=True)
class Extensions:
    workflow: Workflow | None = None
    compaction: Compaction | None = None
    max_tools: int = DEFAULT_MAX_TOOLS
    """Above this many offered tools, only this many (the most relevant) are shown and allowed."""


def parse_extensions(value, tool_names: list[str], param: str = "hearth") -> Extensions:
    if value is None:
        return Extensions()
    check_keys(value, KEYS, param)
    workflow = value.get("workflow")
    if workflow is not None and not tool_names:
        raise FieldError(f"{param}.workflow", "needs tools: the request offers none")
    return Extensions(parse_workflow(workflow, tool_names, f"{param}.workflow") if workflow is not None else None,
                      parse_compaction(value["compaction"], f"{param}.compaction") if "compaction" in value else None,
                      int_field(value, "max_tools", DEFAULT_MAX_TOOLS, param, low=1))
