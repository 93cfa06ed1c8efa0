"""The call grammar for LLM.chat, from what the offline entry point has: the chat template's source,
the tools (OpenAI's shape), tool_choice and the rendered prompt. A template that shows no call
format gets none (LLM.chat does not prompt tools the way the server's prompt mode does)."""

from __future__ import annotations

from hearth.sampling_params import StructuredOutput
from hearth.tool_guard.grammar import lazy_tool_grammar
from hearth.tool_guard.modes import check_mode
from hearth.tool_parsers import (call_constraint, detect_format, detect_reasoning, forced_tools,
                                 prompt_opens_reasoning, supports_tools)


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
