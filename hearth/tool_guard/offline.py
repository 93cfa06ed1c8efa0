"""The call grammar for LLM.chat, and its answers read back as messages, from what the offline entry
point has: the chat template's source, the tools (OpenAI's shape), tool_choice and the rendered
prompt. A template that shows no call format gets none (LLM.chat does not prompt tools the way the
server's prompt mode does)."""

from __future__ import annotations

from hearth.sampling_params import StructuredOutput
from hearth.tool_guard.grammar import lazy_tool_grammar
from hearth.tool_guard.modes import check_mode
from hearth.tool_parsers import (OutputParser, call_constraint, detect_channels, detect_format, detect_reasoning,
                                 forced_tools, prompt_opens_reasoning, reasoning_marks, supports_tools)


def chat_constraint(template_source: str | None, tools: list[dict] | None, tool_choice, mode: str,
                    prompt_text: str, parallel: bool = True) -> StructuredOutput | None:
    check_mode(mode, "tool_guard")
    if mode == "off" or not tools or tool_choice == "none" or not supports_tools(template_source):
        return None
    fmt = detect_format(template_source)
    if fmt is None:
        return None
    if forced_tools(tools, tool_choice):
        return StructuredOutput(grammar=call_constraint(fmt, tools, tool_choice).lark())
    knows, _ = detect_reasoning(template_source)
    grammar = lazy_tool_grammar(fmt, tools, parallel, reasoning=knows,
                                starts_in_reasoning=knows and prompt_opens_reasoning(prompt_text))
    return StructuredOutput(grammar=grammar) if grammar else None


def chat_message(template_source: str | None, tools: list[dict] | None, tool_choice, prompt_text: str, text: str,
                 cut: bool) -> dict:
    """An answer as an OpenAI assistant message, split as the server splits it: reasoning where the
    template has a channel for it, calls of the offered tools in the template's format (or the
    near-misses its parser takes: a fenced JSON call); cut: max_tokens ended it."""
    fmt = detect_format(template_source) if tools and tool_choice != "none" and supports_tools(template_source) else None
    knows, _ = detect_reasoning(template_source)
    starts = knows and prompt_opens_reasoning(prompt_text)
    forced = forced_tools(tools, tool_choice) if fmt else None
    named = forced[0] if forced and isinstance(tool_choice, dict) else None
    parsed = OutputParser(fmt, tools, reasoning=knows, starts_in_reasoning=starts, announce=False,
                          required=bool(forced), named=named, channels=detect_channels(template_source),
                          marks=reasoning_marks(template_source)).parse(text, cut)
    message: dict = {"role": "assistant", "content": parsed.content}
    if parsed.tool_calls:
        message["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                                 for c in parsed.tool_calls]
    if parsed.reasoning:
        message["reasoning_content"] = parsed.reasoning
    return message
