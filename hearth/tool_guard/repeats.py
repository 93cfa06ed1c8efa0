"""A call the model just made, made again: when the conversation ends with the results of the last
assistant turn's calls and the model answers with one of those calls again (same tool, same
arguments), it has not read the result. Small models do this in loops (Qwen2.5-Coder-1.5B on BFCL's
multi-turn file system: `ls` three times over the same listing, a failing `mv` three times over the
same error). The guard re-prompts once with the result it ignored (hearth.api.guarded); a new user
turn, or other calls in between, make the same call legitimate again (the state may have changed).

Progress is read from the structured tool calls of the conversation the client sends, as the
workflow's is (hearth.tool_guard.workflow), never from prose."""

from __future__ import annotations

import json
from dataclasses import dataclass

from hearth.tool_guard.call_arguments import arguments_dict
from hearth.tool_guard.checks import Problem
from hearth.tool_parsers.types import ToolCall

REPEATED_CALL = "repeated_call"
RESULT_CHARS = 300
"""How much of the ignored result the re-prompt quotes (the whole result is in the conversation)."""


@dataclass(frozen=True, slots=True)
class PastCall:
    name: str
    arguments: dict
    result: str | None
    """The tool message answering it (None: no result in the conversation)."""


def last_step(messages: list[dict]) -> list[PastCall]:
    """The calls of the last assistant turn, when only their tool results follow it (else none)."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.get("role") == "tool":
            continue
        if m.get("role") != "assistant" or not m.get("tool_calls") or i == len(messages) - 1:
            return []
        results = {t.get("tool_call_id"): t.get("content") for t in messages[i + 1:]}
        return [PastCall(fn.get("name", ""), arguments_dict(fn.get("arguments")), _text(results.get(c.get("id"))))
                for c in m["tool_calls"] for fn in [c.get("function") or {}]]
    return []


def repeated(calls: list[ToolCall], past: list[PastCall]) -> Problem | None:
    """The first of `calls` that repeats a call of the last step, as a problem for the guard."""
    for call in calls:
        args = arguments_dict(call.arguments)
        same = next((p for p in past if p.name == call.name and p.arguments == args), None)
        if same is not None:
            return Problem(REPEATED_CALL, _why(call.name, same.result), call)
    return None


def _why(name: str, result: str | None) -> str:
    if result is None:
        return f"{name} was just called with these same arguments"
    quoted = result if len(result) <= RESULT_CHARS else result[:RESULT_CHARS] + " ..."
    return (f"{name} was just called with these same arguments and returned: {quoted} -- calling it again "
            "returns the same")


def _text(content) -> str | None:
    if content is None or isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False)
