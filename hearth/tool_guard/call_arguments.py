"""A tool call's arguments as the guard compares them: the conversation's calls carry them as the
wire's JSON string (or, from some clients, an object already), the model's calls as a string."""

from __future__ import annotations

import json


def arguments_dict(arguments) -> dict:
    """`arguments` (a JSON object as text, or a dict) as a dict. Unreadable arguments (not JSON, or
    not an object) become {"": arguments}: equal only to the same text, so two different broken
    calls never count as the same call, nor as a call without arguments."""
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else None
    except ValueError:
        return {"": arguments}
    return value if isinstance(value, dict) else {"": arguments}
