"""Llama 3.1 / 3.2 / 3.3 JSON tool calls: `{"name": ..., "parameters": {...}}`, either as the whole
output or after `<|python_tag|>`, several joined by `;`. The region has no end marker: it runs to
the end of the output (or the next `<|python_tag|>`)."""

from __future__ import annotations

from hearth.tool_parsers.rescue import calls_from_json
from hearth.tool_parsers.types import ToolCall

START = "<|python_tag|>"
END = ""
# an output that begins with one of these is a call region too (custom tools get no python tag)
LEADS = ("{",)
_END_TOKENS = ("<|eom_id|>", "<|eot_id|>")  # when the detokenizer keeps special tokens


def parse(text: str, tools: list[dict] | None) -> list[ToolCall]:
    """The calls in a region; ValueError if there are none. Built-in tools' Python form
    (`brave_search.call(query=...)`) is not JSON and stays text."""
    for token in _END_TOKENS:
        text = text.replace(token, "")
    return calls_from_json(text, tools)
