"""A JSON object given as itself or as its JSON text: what request fields (guided_json) and flags
(--speculative-config) that take either read."""

from __future__ import annotations

import json


def json_object(value, what: str = "a JSON object") -> dict:
    """A dict given as itself or as its JSON text, else a ValueError that says what is wrong (not JSON,
    or not `what`) for the caller to put its field and error type to."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"is not valid JSON: {e.msg} (at {e.pos})") from None
    if not isinstance(value, dict):
        raise ValueError(f"must be {what}, not {type(value).__name__}")
    return value
