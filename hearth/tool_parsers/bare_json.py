"""Models without a tool-call syntax of their own, asked for JSON: the whole output (or a ```json
fence that opens it) is one call object or a list of them. Text before the JSON is never a call,
so an output that opens with anything else streams as content at once."""

from __future__ import annotations

from hearth.tool_parsers.rescue import calls_from_json
from hearth.tool_parsers.types import ToolCall

START = ""  # no marker: only an output that opens with one of LEADS is a call region
END = ""
LEADS = ("{", "[", "```json", "```JSON", "```\n{", "```\n[")


def parse(text: str, tools: list[dict] | None) -> list[ToolCall]:
    """The calls in the whole output; ValueError if it is not call JSON."""
    return calls_from_json(text, tools)
