"""The re-prompt of a failed attempt: the attempt as the assistant's turn, then the error in the
tool channel (a tool result for the failed call), so the model answers it as it would a tool's
error (a call that repeats the last step's is answered with the result it ignored:
hearth.tool_guard.repeats); the cached prompt stays a prefix. An answer with no call has no call to
answer: its error comes as the user's turn."""

from __future__ import annotations

import json

from hearth.tool_guard.checks import NO_CALL, Problem
from hearth.tool_guard.repeats import REPEATED_CALL

REPEAT_HINT = "Use that result: answer the user from it, or call a tool with other arguments."


def retry_messages(output_text: str, problem: Problem, tool_names: list[str]) -> list[dict]:
    """OpenAI-shaped messages to append to the conversation."""
    hint = f"Call one of: {', '.join(tool_names)}, with arguments that match its JSON schema."
    if problem.kind == NO_CALL or problem.call is None:  # no call to answer: the error comes as the user's turn
        return [{"role": "assistant", "content": output_text},
                {"role": "user", "content": json.dumps({"error": problem.message, "hint": hint})}]
    call, repeat = problem.call, problem.kind == REPEATED_CALL
    error = f"{'repeated call' if repeat else 'invalid tool call'}: {problem.message}"
    return [{"role": "assistant", "content": None,
             "tool_calls": [{"id": call.id, "type": "function",
                             "function": {"name": call.name, "arguments": call.arguments}}]},
            {"role": "tool", "tool_call_id": call.id,
             "content": json.dumps({"error": error, "hint": REPEAT_HINT if repeat else hint})}]
