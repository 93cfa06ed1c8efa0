"""Every case of the table, parsed whole: the content and calls it must give."""

from __future__ import annotations

import json
import re

import pytest

from hearth.tool_parsers import FORMATS, ToolCall, ToolParserError, get_format, new_call_id, parse_tool_calls
from tests.tool_parsers.cases import CASES, TOOLS


def test_the_table_covers_every_format():
    assert len(CASES) >= 40
    assert {case.fmt for case in CASES.values()} == set(FORMATS)


@pytest.mark.parametrize("name", CASES)
def test_parse(name):
    case = CASES[name]
    content, calls = parse_tool_calls(case.text, case.fmt, case.tools)
    assert content == case.content
    assert [(c.name, strict_json(c.arguments)) for c in calls] == case.calls
    assert all(re.fullmatch(r"call_[A-Za-z0-9]{24}", c.id) for c in calls)


def strict_json(text: str):
    """json.loads, but RFC 8259's JSON only: Python's json reads NaN and Infinity, which clients reject."""
    def refuse(word):
        raise ValueError(f"{word} is not JSON")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_has_the_protocol(fmt):
    module = get_format(fmt)
    assert isinstance(module.START, str) and isinstance(module.END, str) and callable(module.parse)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("text", ["", "   ", "{", "[", "<", "```", "\x00\\", '{"name": ', "<tool_call>{{{{"])
def test_nothing_raises(fmt, text):
    content, calls = parse_tool_calls(text, fmt, TOOLS)
    assert calls == [] and content.strip() == text.strip()


def test_deep_nesting_is_text_not_a_crash():
    text = "<tool_call>" + "[" * 100_000 + "</tool_call>"
    assert parse_tool_calls(text, "hermes") == (text, [])


def test_unknown_format_is_a_clear_error():
    with pytest.raises(ToolParserError, match="unknown tool-call format 'nope'.*hermes"):
        get_format("nope")


def test_call_ids_and_equality():
    assert new_call_id("toolu_").startswith("toolu_") and new_call_id() != new_call_id()
    # equality is what the model said, not the fresh label
    assert ToolCall("call_a", "f", "{}") == ToolCall("call_b", "f", "{}")
    assert ToolCall("call_a", "f", "{}") != ToolCall("call_a", "g", "{}")
