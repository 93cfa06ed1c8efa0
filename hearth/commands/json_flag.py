"""A flag whose value is a JSON object (vLLM's --override-generation-config, llama-server's
--chat-template-kwargs): parsed once, anything else one line naming the flag."""

from __future__ import annotations

import json

from hearth.errors import HearthError


def json_flag(flag: str, text: str | None, what: str) -> dict:
    """The flag's JSON object ({} when not given); not JSON, or not an object of `what`: one line."""
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise HearthError(f"{flag}: not JSON ({e.msg}): {text!r}") from None
    if not isinstance(value, dict):
        raise HearthError(f"{flag} takes a JSON object of {what}, got {text!r}")
    return value
