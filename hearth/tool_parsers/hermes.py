"""Hermes / Qwen2.5 / Qwen3 / SmolLM tool calls: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`,
one tag per call (a tag holding a list or several objects is accepted too).

Qwen models sometimes write Qwen3-Coder's XML body inside the tags; that is parsed as qwen_xml."""

from __future__ import annotations

from hearth.tool_parsers import qwen_xml
from hearth.tool_parsers.rescue import calls_from_json
from hearth.tool_parsers.types import ToolCall

START = "<tool_call>"
END = "</tool_call>"
# small models given the tool prompt often drop the tags and write the call's JSON alone (or
# fenced, or as `<function=NAME>{...}</function>`): an output that begins so is held to the end
# and parsed as a call region (the tool guard's lazy grammar triggers on the same openers)
LEADS = ("{", "```json", "<function=")
is_open = qwen_xml.is_open  # an XML body cut inside its function


def parse(text: str, tools: list[dict] | None) -> list[ToolCall]:
    """The calls in the text between START and END; ValueError if there are none."""
    if qwen_xml.is_xml(text):
        return qwen_xml.parse(text, tools)
    return calls_from_json(text, tools)
