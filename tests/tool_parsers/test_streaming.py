"""Streaming equals parsing whole, for every case and every way of cutting it into deltas; and
content goes out as soon as it cannot be the start of a marker."""

from __future__ import annotations

import zlib

import pytest

from hearth.tool_parsers import (ContentDelta, ReasoningDelta, StreamingToolParser, ToolCallEvent,
                                 collect, parse_tool_calls)
from tests.tool_parsers.cases import ADD_JSON, CASES, GW, TOOLS
from tests.tool_parsers.splits import splits


def stream(parser, deltas):
    events = []
    for delta in deltas:
        events += parser.feed(delta)
    return events + parser.finish()


@pytest.mark.parametrize("name", CASES)
def test_every_split_streams_like_the_whole(name):
    case = CASES[name]
    content, calls = parse_tool_calls(case.text, case.fmt, case.tools)
    for deltas in splits(case.text, seed=zlib.crc32(name.encode())):
        events = stream(StreamingToolParser(case.fmt, case.tools), deltas)
        assert all(not isinstance(e, ContentDelta) or e.text for e in events)
        assert [e.index for e in events if isinstance(e, ToolCallEvent)] == list(range(len(calls)))
        got = collect(events)
        assert (got.content, got.tool_calls) == (content, calls), deltas


# (format, deltas, events expected after each feed): what must go out at once, what waits
PROMPTNESS = [
    ("hermes", ["Hi there", " <tool_", "call>", GW, "</tool_call>", " bye"],
     [["Hi there"], [], [], [], [("get_weather",)], ["  bye"]]),
    ("hermes", ["a <b", " c"], [["a <b"], [" c"]]),
    ("mistral", ["See [", "1]", " [TOOL_", "CALLS][", ADD_JSON, "]"], [["See"], [" [1]"], [], [], [], []]),
    ("llama3_json", ["The", " answer"], [["The"], [" answer"]]),
    ("llama3_json", ["  ", "{", '"name": "add"'], [[], [], []]),
    ("bare_json", ["``", "`py", "thon"], [[], ["```py"], ["thon"]]),
    ("qwen_xml", ["x\n\n", "y"], [["x"], ["\n\ny"]]),
]


@pytest.mark.parametrize("fmt, deltas, expected", PROMPTNESS)
def test_content_is_not_held_longer_than_a_marker_prefix(fmt, deltas, expected):
    parser = StreamingToolParser(fmt, TOOLS)
    for delta, want in zip(deltas, expected):
        got = [e.text if isinstance(e, ContentDelta) else (e.call.name,) for e in parser.feed(delta)]
        assert got == want, delta


def test_finish_parses_an_unterminated_call_or_gives_it_back():
    parser = StreamingToolParser("hermes", TOOLS)
    assert parser.feed('<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}') == []
    [event] = parser.finish()
    assert event.call.name == "add" and event.call.arguments == '{"a": 1, "b": 2}'
    parser = StreamingToolParser("hermes", TOOLS)
    assert parser.feed("<tool_call>{oops") == []
    assert parser.finish() == [ContentDelta("<tool_call>{oops")]


def test_no_reasoning_events_from_the_tool_parser():
    events = stream(StreamingToolParser("hermes"), ["<think>x</think>"])
    assert not any(isinstance(e, ReasoningDelta) for e in events)
