"""Model output -> channels (content, reasoning, tool calls) for one choice, through the
tool_parsers package; and finish reasons in each API's words."""

from __future__ import annotations

from hearth.api.tools import ToolPlan
from hearth.tool_parsers import OutputParser

# engine finish reason -> (OpenAI finish_reason, Anthropic stop_reason)
_REASONS = {"stop": ("stop", "end_turn"), "length": ("length", "max_tokens"), "abort": ("stop", "end_turn")}


def output_parser(served, plan: ToolPlan, prompt_text: str, streaming: bool = True) -> OutputParser:
    """One per choice: parsers hold state while streaming; streaming: calls go out as written."""
    starts = served.starts_in_reasoning(prompt_text)
    return OutputParser(plan.parse_format, plan.tools, reasoning=served.knows_reasoning or starts,
                        starts_in_reasoning=starts, announce=streaming, required=plan.required, named=plan.named,
                        channels=served.channels, marks=served.reasoning_marks)


def openai_finish(reason: str | None, called: bool) -> str:
    if called and reason in ("stop", None):
        return "tool_calls"
    return _REASONS.get(reason or "stop", ("stop",))[0]


def anthropic_stop(reason: str | None, called: bool, stop_reason) -> str:
    if called and reason in ("stop", None):
        return "tool_use"
    if reason == "stop" and isinstance(stop_reason, str):
        return "stop_sequence"
    return _REASONS.get(reason or "stop", (None, "end_turn"))[1]
