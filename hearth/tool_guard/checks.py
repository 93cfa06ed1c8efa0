"""What is wrong with an output's calls, for the guard to fix: a call that names no offered tool,
arguments that fail their schema (after safe coercion), no call where tool_choice required one."""

from __future__ import annotations

from dataclasses import dataclass, field

from hearth.tool_guard.validate import Coercion, check_arguments
from hearth.tool_parsers.types import ToolCall

UNKNOWN_TOOL, INVALID_ARGUMENTS, NO_CALL = "unknown_tool", "invalid_arguments", "no_call"


@dataclass(frozen=True, slots=True)
class Problem:
    kind: str
    message: str
    call: ToolCall | None = None


@dataclass(slots=True)
class Checked:
    calls: list[ToolCall]
    """The output's calls, arguments coerced where that was safe (invalid ones as they came)."""
    problems: list[Problem] = field(default_factory=list)
    coercions: list[tuple[int, Coercion]] = field(default_factory=list)
    """(call index, coercion)."""

    @property
    def ok(self) -> bool:
        return not self.problems


def check_calls(calls: list[ToolCall], schemas: dict[str, dict], required: bool) -> Checked:
    """`schemas`: name -> arguments schema of the callable tools."""
    out = Checked([])
    for i, call in enumerate(calls):
        if call.name not in schemas:
            offered = ", ".join(schemas) or "none"
            out.problems.append(Problem(UNKNOWN_TOOL, f"no tool named {call.name!r}; the tools are: {offered}", call))
            out.calls.append(call)
            continue
        if call.unparsed:  # streamed while written, then did not parse: its arguments are the model's broken text
            out.problems.append(Problem(INVALID_ARGUMENTS, f"{call.name}: arguments are not JSON: {call.unparsed}", call))
            out.calls.append(call)
            continue
        verdict = check_arguments(call.arguments, schemas[call.name])
        out.coercions += [(i, c) for c in verdict.coercions]
        if not verdict.ok:
            out.problems.append(Problem(INVALID_ARGUMENTS, f"{call.name}: " + "; ".join(verdict.errors), call))
            out.calls.append(call)
            continue
        fixed = call if not verdict.coercions else ToolCall(call.id, call.name, _dumps(verdict.value))
        out.calls.append(fixed)
    if required and not calls:
        out.problems.append(Problem(NO_CALL, "a tool call was required, but the answer was text"))
    return out


def _dumps(value) -> str:
    import json
    return json.dumps(value, ensure_ascii=False)
