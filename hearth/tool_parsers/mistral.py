"""Mistral tool calls. Older templates (v3 tokenizer): `[TOOL_CALLS]` then a JSON list
`[{"name": ..., "arguments": {...}}]`; newer ones (v11+): `[TOOL_CALLS]name[ARGS]{...}` once per
call, sometimes with `[CALL_ID]id` before `[ARGS]`. There is no end marker: a region runs to the
next `[TOOL_CALLS]` or the end of the output."""

from __future__ import annotations

import re

from hearth.tool_parsers.lenient_json import json_values
from hearth.tool_parsers.rescue import calls_from_json, to_call
from hearth.tool_parsers.types import ToolCall

START = "[TOOL_CALLS]"
END = ""
_NAMED = re.compile(r"\s*([\w.\-]+)\s*(?:\[CALL_ID\]\s*\S*?\s*)?\[ARGS\](.*)", re.DOTALL)


def parse(text: str, tools: list[dict] | None) -> list[ToolCall]:
    """The calls in a region; ValueError if there are none."""
    text = text.replace("</s>", "")  # when the detokenizer keeps special tokens
    named = _NAMED.match(text)
    if not named:
        return calls_from_json(text, tools)
    args = json_values(named.group(2))
    if not args:
        raise ValueError(f"no JSON arguments after {named.group(1)}[ARGS]")
    return [to_call({"name": named.group(1), "arguments": args[0]}, tools)]
