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
        raise ValueError(f"must be {what}, not {json_kind(value)}")
    return value


JSON_KINDS = ((type(None), "null"), (bool, "a boolean"), ((int, float), "a number"), (str, "a string"),
              (list, "an array"))
"""JSON's names for what a value parsed as: a user wrote `null`, not Python's NoneType (bool before int)."""


def json_kind(value) -> str:
    return next((name for kind, name in JSON_KINDS if isinstance(value, kind)), type(value).__name__)
