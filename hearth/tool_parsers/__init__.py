"""Model output -> content, reasoning and tool calls, streamed or whole.

The server's path: pick the format with `detect_format(template)` (or, for a template without
tools, prompt with `tools_system_prompt(tools)` and use "hermes"), reasoning with
`detect_reasoning(template)` / `prompt_opens_reasoning(prompt)`, or `detect_channels(template)` for a
format that reads the whole output (harmony's channels); then one `OutputParser` per
response: `feed(delta)` / `finish()` for streams, `parse(text)` for whole outputs. Nothing here
raises on model output: what does not parse as a call stays content."""

from __future__ import annotations

from hearth.tool_parsers.formats import FORMATS, detect_channels, detect_format, get_format
from hearth.tool_parsers.output import OutputParser
from hearth.tool_parsers.prompt import PROMPT_FORMAT, supports_tools, tools_system_prompt
from hearth.tool_parsers.reasoning import (Marks, StreamingReasoningParser, detect_reasoning,
                                           prompt_opens_reasoning, reasoning_marks, split_reasoning)
from hearth.tool_parsers.schema import CallConstraint, call_constraint, forced_tools, schema_error, tool_call_schema
from hearth.tool_parsers.stream import StreamingToolParser, parse_tool_calls
from hearth.tool_parsers.types import (ContentDelta, Event, ParsedOutput, ReasoningDelta, ToolCall,
                                       ToolCallArgumentsDelta, ToolCallEvent, ToolCallStart, ToolParserError,
                                       arguments_rest, collect, new_call_id)

__all__ = [
    "FORMATS", "CallConstraint", "ContentDelta", "Event", "Marks", "OutputParser", "PROMPT_FORMAT",
    "ParsedOutput", "ReasoningDelta", "StreamingReasoningParser", "StreamingToolParser", "ToolCall",
    "ToolCallArgumentsDelta", "ToolCallEvent", "ToolCallStart", "ToolParserError", "arguments_rest", "call_constraint",
    "collect", "detect_channels", "detect_format",
    "detect_reasoning", "forced_tools", "get_format", "new_call_id", "parse_tool_calls",
    "prompt_opens_reasoning", "reasoning_marks", "split_reasoning", "supports_tools", "tool_call_schema", "schema_error",
    "tools_system_prompt",
]
