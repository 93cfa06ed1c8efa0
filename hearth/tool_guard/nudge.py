"""A nudge: what the server appends to the conversation, inside one request, when the model's output
broke a rule it can fix (answered before its work was done, called a tool out of order, looped),
so that the next attempt sees why. The wording grows firmer with each nudge; the number is bounded
by the caller. Errors about a call go back in the tool channel, as results of that call (Forge's
message shapes); a premature answer gets a short user turn."""

from __future__ import annotations

from dataclasses import dataclass, field

from hearth.tool_parsers.types import ToolCall

_FIRMER = ("", " This is required before you answer.", " Reply with the tool call only, no other text.")


@dataclass(frozen=True, slots=True)
class Verdict:
    rule: str
    """"premature_answer", "missing_prerequisite", "repeated_call", "after_terminal"."""
    why: str
    """One sentence for the model."""
    call_index: int | None = None
    """The output's call at fault (its result carries `why`); None: the answer itself is at fault."""
    force: tuple[str, ...] = field(default=())
    """Tools the last nudge may constrain the output to (a grammar), when the caller has one."""


def nudge_messages(verdict: Verdict, level: int, content: str, calls: list[ToolCall]) -> list[dict]:
    """OpenAI-shaped messages to append after an output (`content`, `calls`) that got `verdict`; level
    1, 2, ... is this request's nudge number."""
    why = verdict.why + _FIRMER[min(level, len(_FIRMER)) - 1]
    if not calls:
        return [{"role": "assistant", "content": content}, {"role": "user", "content": why}]
    tool_calls = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                  for c in calls]
    out: list[dict] = [{"role": "assistant", "content": content, "tool_calls": tool_calls}]
    for i, c in enumerate(calls):
        at_fault = verdict.call_index is None or verdict.call_index == i
        result = f"error: {why}" if at_fault else "not run: another call of this turn was refused"
        out.append({"role": "tool", "tool_call_id": c.id, "name": c.name, "content": result})
    return out
