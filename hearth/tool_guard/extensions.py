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


GUARD = "guard"
"""The mode in which the automatic parts act (rescue, ranking, the forced-call nudge); `off` (the
eval's `bare`) and `grammar` leave them out. The request's own opt-ins (workflow, compaction, an
explicit max_tools) act in every mode: the client asked for them."""


@dataclass(frozen=True, slots=True)
class Extensions:
    workflow: Workflow | None = None
    compaction: Compaction | None = None
    max_tools: int | None = None
    """Above this many offered tools, only this many (the most relevant) are shown and allowed;
    None: DEFAULT_MAX_TOOLS in guard mode, no ranking in the others."""
    mode: str = GUARD
    """hearth.tool_guard as sent (checked by the guard's core), else the server's default."""

    @property
    def automatic(self) -> bool:
        return self.mode == GUARD

    @property
    def tool_cap(self) -> int | None:
        return self.max_tools if self.max_tools is not None else DEFAULT_MAX_TOOLS if self.automatic else None


def parse_extensions(value, tool_names: list[str], param: str = "hearth", default_mode: str = GUARD) -> Extensions:
    if value is None:
        return Extensions(mode=default_mode)
    check_keys(value, KEYS, param)
    mode = value.get("tool_guard", default_mode)
    workflow = value.get("workflow")
    if workflow is not None and not tool_names:
        raise FieldError(f"{param}.workflow", "needs tools: the request offers none")
    return Extensions(parse_workflow(workflow, tool_names, f"{param}.workflow") if workflow is not None else None,
                      parse_compaction(value["compaction"], f"{param}.compaction") if "compaction" in value else None,
                      int_field(value, "max_tools", 1, param, low=1) if "max_tools" in value else None,
                      mode if isinstance(mode, str) else default_mode)
