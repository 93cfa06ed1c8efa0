"""Which format and reasoning style a chat template teaches, and the system prompt for templates
that know no tools."""

from __future__ import annotations

import json

import pytest

from hearth.tool_parsers import (PROMPT_FORMAT, detect_format, detect_reasoning, parse_tool_calls,
                                 prompt_opens_reasoning, supports_tools, tools_system_prompt)
from tests.tool_parsers import templates as t
from tests.tool_parsers.cases import ANTHROPIC_TOOLS, TOOLS

# template -> format, (reasoning, starts_in_reasoning), supports tools
TEMPLATES = [
    (t.QWEN25, "hermes", (False, False), True),
    (t.QWEN3, "hermes", (True, False), True),
    (t.QWEN3_CODER, "qwen_xml", (False, False), True),
    (t.QWQ, "hermes", (True, True), True),
    (t.DEEPSEEK_R1, None, (True, True), False),
    (t.MISTRAL, "mistral", (False, False), True),
    (t.LLAMA31, "llama3_json", (False, False), True),
    (t.LLAMA32, "llama3_json", (False, False), True),
    (t.HARMONY, "harmony", (False, False), True),
    (t.GEMMA4, "gemma4", (True, False), True),  # its reasoning is a channel (detect_channels), not <think>
    (t.CHATML, None, (False, False), False),
    (t.TOOLS_ONLY_IN_TEXT, None, (False, False), False),
    (None, None, (False, False), False),
    ("", None, (False, False), False),
]


@pytest.mark.parametrize("source, fmt, reasoning, tools", TEMPLATES)
def test_detect(source, fmt, reasoning, tools):
    assert detect_format(source) == fmt
    assert detect_reasoning(source) == reasoning
    assert supports_tools(source) == tools


@pytest.mark.parametrize("prompt, opens", [
    ("<|im_start|>assistant\n<think>\n", True),
    ("<|im_start|>assistant\n<think>\n\n</think>\n\n", False),  # Qwen3, enable_thinking=False
    ("<think>old</think>answer<|im_start|>assistant\n", False),
    ("<|im_start|>assistant\n", False),
])
def test_prompt_opens_reasoning(prompt, opens):
    assert prompt_opens_reasoning(prompt) == opens


def test_tools_system_prompt_lists_schemas_and_asks_for_hermes_calls():
    prompt = tools_system_prompt(TOOLS + ANTHROPIC_TOOLS)
    lines = prompt.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()
    assert [json.loads(line)["function"] for line in lines[:3]] == [
        {"description": tool["function"]["description"], **tool["function"]} for tool in TOOLS]
    assert json.loads(lines[3])["function"]["parameters"] == ANTHROPIC_TOOLS[0]["input_schema"]
    assert '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>' in prompt
    assert PROMPT_FORMAT == "hermes"
    _, calls = parse_tool_calls('<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>',
                                PROMPT_FORMAT, TOOLS)
    assert [c.name for c in calls] == ["add"]
