"""Tools for a model whose chat template knows none (SmolLM2, gemma-3, ChatML fallbacks): describe
them in a system prompt and ask for hermes-style calls, which is what most small instruct models
were tuned on; then parse the output with the `hermes` format."""

from __future__ import annotations

import json
import re

from hearth.tool_parsers.types import tool_function

# the wording of Qwen2.5's template (itself the Hermes-2-Pro prompt), which small models know best
_HEADER = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
           "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n")
_FOOTER = ("\n</tools>\n\nFor each function call, return a json object with function name and "
           "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
           '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')
_JINJA_CODE = re.compile(r"\{[{%](.*?)[%}]\}", re.DOTALL)
_STRING = re.compile(r"'[^']*'|\"[^\"]*\"")
_TOOLS = re.compile(r"\btools\b")
PROMPT_FORMAT = "hermes"  # the format to parse outputs with after tools_system_prompt


def tools_system_prompt(tools: list[dict]) -> str:
    """A system prompt (or the part to append to the user's system message) that lists each
    tool as an OpenAI function schema, one JSON object per line, and asks for
    `<tool_call>{"name": ..., "arguments": ...}</tool_call>` blocks."""
    lines = [json.dumps({"type": "function", "function": _openai_function(t)}, ensure_ascii=False)
             for t in tools]
    return _HEADER + "\n".join(lines) + _FOOTER


def supports_tools(template_source: str | None) -> bool:
    """Whether the template's code reads a `tools` variable (its text and string literals may say
    "tools" without rendering any)."""
    code = _JINJA_CODE.findall(template_source or "")
    return any(_TOOLS.search(_STRING.sub("", block)) for block in code)


def _openai_function(tool: dict) -> dict:
    """OpenAI's function shape for a tool from either wire (Anthropic's has input_schema)."""
    fn = tool_function(tool)
    out = {"name": fn.get("name"), "description": fn.get("description", "")}
    out["parameters"] = fn.get("parameters", fn.get("input_schema", {"type": "object"}))
    return out
