"""Reasoning split off the content, whole and streamed, and then tool calls parsed from the rest."""

from __future__ import annotations

import json

import pytest

from hearth.tool_parsers import (ContentDelta, OutputParser, ReasoningDelta, StreamingReasoningParser,
                                 collect, split_reasoning)
from hearth.tool_parsers.reasoning import GEMMA_THOUGHT
from tests.tool_parsers.cases import ADD, ADD_JSON, GW, PARIS, TOOLS
from tests.tool_parsers.splits import splits

# text, starts_in_reasoning -> reasoning, content
REASONING_CASES = [
    ("<think>\nI should add.\n</think>\n\n4", False, "I should add.", "4"),
    ("4", False, "", "4"),
    ("  <think>x</think>y", False, "x", "y"),
    ("<think>never closed\n", False, "never closed", ""),
    ("x</think>y", True, "x", "y"),
    ("<think>\nx</think>y", True, "x", "y"),
    ("no close", True, "no close", ""),
    ("</think>\n\nonly content", True, "", "only content"),
    ("<thinking>is a word", False, "", "<thinking>is a word"),
    ("answer <think>x</think>", False, "", "answer <think>x</think>"),
    ("<think></think>answer\n", False, "", "answer\n"),
    ("", False, "", ""),
    ("", True, "", ""),
    ("<thi", False, "", "<thi"),
    ("<think>a</think>b</think>c", False, "a", "b</think>c"),
    ("<think>\n\n</think>\n\nHello\n", False, "", "Hello\n"),
    ("<think>a < b </thin but not closed", False, "a < b </thin but not closed", ""),
    ("  plain  ", False, "", "  plain  "),
    ("<|channel>thought\nThe user greets.<channel|>Hello!", False, "The user greets.", "Hello!"),  # Gemma 4
    ("<|channel>thought\nno close </think>", False, "no close </think>", ""),
    ("Hi <|channel>thought x<channel|>", False, "", "Hi <|channel>thought x<channel|>"),
]


@pytest.mark.parametrize("text, starts_in, reasoning, content", REASONING_CASES)
def test_split_reasoning(text, starts_in, reasoning, content):
    assert split_reasoning(text, starts_in) == (reasoning, content)


@pytest.mark.parametrize("text, starts_in, reasoning, content", REASONING_CASES)
def test_every_split_streams_like_the_whole(text, starts_in, reasoning, content):
    for deltas in splits(text):
        parser = StreamingReasoningParser(starts_in)
        events = [e for d in deltas for e in parser.feed(d)] + parser.finish()
        assert all(e.text for e in events)
        got = collect(events)
        assert (got.reasoning, got.content) == (reasoning, content), deltas


def test_reasoning_streams_while_it_comes():
    parser = StreamingReasoningParser()
    assert parser.feed("<thi") == []
    assert parser.feed("nk>Let me") == [ReasoningDelta("Let me")]
    assert parser.feed(" see</th") == [ReasoningDelta(" see")]
    assert parser.feed("ink>\n\nIt is") == [ContentDelta("It is")]
    assert parser.feed(" <think>") == [ContentDelta(" <think>")]  # content never waits on a <


# tool_format, tools, reasoning, starts_in, text -> reasoning, content, calls
OUTPUT_CASES = [
    ("hermes", TOOLS, True, False, f"<think>\nNeed weather.\n</think>\n\n<tool_call>\n{GW}\n</tool_call>",
     "Need weather.", "", [PARIS]),
    ("hermes", TOOLS, True, True, f"Need to add.</think>Adding.\n<tool_call>{ADD_JSON}</tool_call>",
     "Need to add.", "Adding.", [ADD]),
    ("hermes", TOOLS, True, False, f"<think><tool_call>{ADD_JSON}</tool_call></think>Nope.",
     f"<tool_call>{ADD_JSON}</tool_call>", "Nope.", []),  # calls inside reasoning are not calls
    ("llama3_json", TOOLS, True, False, '<think>hm</think>\n{"name": "add", "parameters": {"a": 1, "b": 2}}',
     "hm", "", [ADD]),
    (None, None, True, False, "<think>a</think>\n\nb", "a", "b", []),
    (None, None, False, False, "<think>a</think> b ", "", "<think>a</think> b ", []),
    ("qwen_xml", TOOLS, False, False, "ok\n<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n"
     "<parameter=b>\n2\n</parameter>\n</function>\n</tool_call>", "", "ok", [ADD]),
    ("mistral", TOOLS, True, True, f"plan</think>[TOOL_CALLS][{ADD_JSON}]", "plan", "", [ADD]),
    ("gemma4", TOOLS, True, False, "<|channel>thought\nAdd them.<channel|><|tool_call>call:add{a:1,b:2}<tool_call|>",
     "Add them.", "", [ADD]),
]


@pytest.mark.parametrize("fmt, tools, reasoning, starts_in, text, want_reasoning, want_content, want_calls",
                         OUTPUT_CASES)
def test_output_parser(fmt, tools, reasoning, starts_in, text, want_reasoning, want_content, want_calls):
    whole = OutputParser(fmt, tools, reasoning, starts_in).parse(text)
    assert (whole.reasoning, whole.content) == (want_reasoning, want_content)
    assert [(c.name, json.loads(c.arguments)) for c in whole.tool_calls] == want_calls
    for deltas in splits(text):
        parser = OutputParser(fmt, tools, reasoning, starts_in)
        events = [e for d in deltas for e in parser.feed(d)] + parser.finish()
        assert collect(events) == whole, deltas


def test_parse_does_not_disturb_a_stream_in_progress():
    parser = OutputParser("hermes", TOOLS, reasoning=True)
    events = parser.feed("<think>a")
    parser.parse("<think>zzz</think>other")
    events += parser.feed("</think>b") + parser.finish()
    assert collect(events).reasoning == "a" and collect(events).content == "b"


# Gemma 4's marks are special tokens: read wherever they come once the template says they are its own
GEMMA_CASES = [
    ("It is sunny in Paris.<|channel>thought\n<channel|>", "", "It is sunny in Paris."),  # an empty thought at the end
    ("It is sunny.<channel|>", "", "It is sunny."),  # a lone close mark
    ("Let me check.<|channel>thought\nneed weather<channel|>Sunny.", "need weather", "Let me check.Sunny."),
    ("<|channel>thought\na<channel|>b<|channel>thought\nc<channel|>", "a\nc", "b"),
    ("x < y and <|chan is text", "", "x < y and <|chan is text"),
]


@pytest.mark.parametrize("text, reasoning, content", GEMMA_CASES)
def test_gemma4_thoughts_are_read_anywhere(text, reasoning, content):
    assert split_reasoning(text, marks=GEMMA_THOUGHT) == (reasoning, content)
    for deltas in splits(text):
        parser = StreamingReasoningParser(marks=GEMMA_THOUGHT)
        got = collect([e for d in deltas for e in parser.feed(d)] + parser.finish())
        assert (got.reasoning, got.content) == (reasoning, content), deltas
    # without the template's marks (another model) such text after content is content
    assert split_reasoning("Hi.<channel|>")[1] == "Hi.<channel|>"


def test_gemma4_thought_before_a_call_after_text():
    text = "Let me check.<|channel>thought\nneed weather<channel|><|tool_call>call:add{a:1,b:2}<tool_call|>"
    parsed = OutputParser("gemma4", TOOLS, True, marks=GEMMA_THOUGHT).parse(text)
    assert (parsed.reasoning, parsed.content) == ("need weather", "Let me check.")
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [ADD]
