"""A call the model just made, made again where repeating it is plainly useless: when the
conversation ends with the results of the last assistant turn's calls and the model answers with one
of those calls again (same tool, same arguments), and that call's result was an error (the client
marked it, or it reads as one: tool_error), or the call already returned the same result in at least
LOOP steps in a row. Small models do this in loops (Qwen2.5-Coder-1.5B on BFCL's multi-turn file
system: `ls` three times over the same listing, a failing `mv` three times over the same error). The
guard re-prompts once with the result it ignored (hearth.api.guarded). A call whose result may change
is made again legitimately: a polling agent's `get_job_status(id)` after "pending", or after a
result that differs from the one before; so are calls after a new user turn, or after other calls in
between (the state may have changed).

Progress is read from the structured tool calls of the conversation the client sends, as the
workflow's is (hearth.tool_guard.workflow), never from prose."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace

from hearth.tool_guard.call_arguments import arguments_dict
from hearth.tool_guard.checks import Problem
from hearth.tool_parsers.types import ToolCall

REPEATED_CALL = "repeated_call"
RESULT_CHARS = 300
"""How much of the ignored result the re-prompt quotes (the whole result is in the conversation)."""
LOOP = 2
"""Steps in a row that made a call and got the same result: the next same call is a loop."""
ERROR_KEYS = ("error", "errors", "exception")
"""A result that is a JSON object with one of these keys set (not null, false or empty) is an error
(BFCL's multi-turn tools answer `{"error": "mv: no such file"}`)."""
ERROR_STATUS = {"status": ("error", "failed", "failure"), "success": (False,), "ok": (False,)}
"""Or one whose key holds one of these values."""
ERROR_TEXT = re.compile(rb"\A\s*(?:(?:error|exception)\s*[:\-\[(\d]|traceback \(most recent call last\)|\w+(?:error|exception)\s*:)",
                        re.I)
"""Or a text result that opens as an error message does (`Error: ...`, `ValueError: ...`)."""


@dataclass(frozen=True, slots=True)
class PastCall:
    name: str
    arguments: dict
    result: str | None
    """The tool message answering it (None: no result in the conversation)."""
    error: bool = False
    """The result is an error: the client marked it (Anthropic's tool_result is_error) or tool_error."""
    same: int = 1
    """How many steps in a row, ending with the last, made this call and got this result."""


def last_step(messages: list[dict]) -> list[PastCall]:
    """The calls of the last assistant turn, when only their tool results follow it (else none),
    each with how many steps in a row made it with the same result."""
    steps = _steps(messages)
    if not steps:
        return []
    out = []
    for call in steps[0]:
        same = 1
        for earlier in steps[1:]:
            if call.result is None or call not in earlier:  # PastCall equality: name, arguments, result
                break
            same += 1
        out.append(replace(call, same=same))
    return out


def repeated(calls: list[ToolCall], past: list[PastCall]) -> Problem | None:
    """The first of `calls` that repeats a call of the last step whose repetition is useless (its
    result an error, or a loop), as a problem for the guard."""
    for call in calls:
        args = arguments_dict(call.arguments)
        same = next((p for p in past if p.name == call.name and p.arguments == args and (p.error or p.same >= LOOP)),
                    None)
        if same is not None:
            return Problem(REPEATED_CALL, _why(same), call)
    return None


def tool_error(result: str | None) -> bool:
    """Whether a tool's result reads as an error message (ERROR_KEYS, ERROR_STATUS, ERROR_TEXT)."""
    try:
        value = json.loads(result) if result else None
    except ValueError:
        value = result
    if isinstance(value, str):
        return ERROR_TEXT.match(value.encode()) is not None
    if not isinstance(value, dict):
        return False
    return (any(value.get(k) not in (None, False, "", [], {}) for k in ERROR_KEYS)
            or any(type(value.get(k)) in (str, bool) and _lower(value.get(k)) in bad for k, bad in ERROR_STATUS.items()))


def _lower(v):
    return v.lower() if isinstance(v, str) else v


def _steps(messages: list[dict]) -> list[list[PastCall]]:
    """The trailing steps of the conversation, last first: each an assistant turn's calls with the
    tool results after it, back to the first message that is neither (a user turn, a text answer)."""
    steps, end = [], len(messages)
    while True:
        i = end - 1
        while i >= 0 and messages[i].get("role") == "tool":
            i -= 1
        m = messages[i] if i >= 0 else {}
        if i == end - 1 or m.get("role") != "assistant" or not m.get("tool_calls"):
            return steps  # a call whose result has not come (the client's turn), or no step
        results = {t.get("tool_call_id"): t for t in messages[i + 1:end]}
        steps.append([_past(c, results.get(c.get("id"))) for c in m["tool_calls"]])
        end = i


def _past(call: dict, result: dict | None) -> PastCall:
    fn = call.get("function") or {}
    text = None if result is None else _text(result.get("content"))
    return PastCall(fn.get("name", ""), arguments_dict(fn.get("arguments")), text,
                    bool(result and result.get("is_error")) or tool_error(text))


def _why(p: PastCall) -> str:
    result = p.result or ""
    quoted = result if len(result) <= RESULT_CHARS else result[:RESULT_CHARS] + " ..."
    if p.error:
        return (f"{p.name} was just called with these same arguments and failed: {quoted} -- calling it again "
                "fails the same way")
    return (f"{p.name} was just called with these same arguments {p.same} times in a row and returned the same "
            f"each time: {quoted} -- calling it again returns the same")


def _text(content) -> str | None:
    if content is None or isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False)
