"""Streaming equals parsing whole, for every case and every way of cutting it into deltas; and
content goes out as soon as it cannot be the start of a marker."""

from __future__ import annotations

import json
import zlib

import pytest

from hearth.tool_parsers import (ContentDelta, ReasoningDelta, StreamingToolParser, ToolCallEvent,
                                 collect, parse_tool_calls)
from hearth.tool_parsers.types import ToolCallArgumentsDelta, ToolCallStart
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
    for deltas in splits(case.text, seed=zlib.crc32(name.encode())):  # a client that does not stream
        events = stream(StreamingToolParser(case.fmt, case.tools, announce=False), deltas)
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
        got = [e.text if isinstance(e, ContentDelta) else (e.call.name,) for e in parser.feed(delta)
               if isinstance(e, (ContentDelta, ToolCallEvent))]
        assert got == want, delta


def test_finish_parses_an_unterminated_call_or_gives_it_back():
    parser = StreamingToolParser("hermes", TOOLS)
    assert [type(e) for e in parser.feed('<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}')] \
        == [ToolCallStart, ToolCallArgumentsDelta]  # announced as it is written
    [event] = parser.finish()
    assert event.call.name == "add" and event.call.arguments == '{"a": 1, "b": 2}'
    parser = StreamingToolParser("hermes", TOOLS)
    assert parser.feed("<tool_call>{oops") == []
    assert parser.finish() == [ContentDelta("<tool_call>{oops")]


def test_no_reasoning_events_from_the_tool_parser():
    events = stream(StreamingToolParser("hermes"), ["<think>x</think>"])
    assert not any(isinstance(e, ReasoningDelta) for e in events)


@pytest.mark.parametrize("name", CASES)
def test_announced_calls_stream_a_prefix_of_their_final_arguments(name):
    """Whatever the split: a started call's id and name match its complete call, and its argument
    pieces joined are exactly the final arguments (a client that joins them holds the call)."""
    case = CASES[name]
    for deltas in splits(case.text, seed=zlib.crc32(name.encode())):
        events = stream(StreamingToolParser(case.fmt, case.tools), deltas)
        started = {e.index: e for e in events if isinstance(e, ToolCallStart)}
        pieces: dict[int, str] = {}
        for e in events:
            if isinstance(e, ToolCallArgumentsDelta):
                assert e.index in started
                pieces[e.index] = pieces.get(e.index, "") + e.text
        for e in events:
            if isinstance(e, ToolCallEvent) and e.index in started:
                assert (e.call.id, e.call.name) == (started[e.index].id, started[e.index].name)
                assert e.call.arguments.startswith(pieces.get(e.index, "")), deltas


def test_arguments_go_out_as_they_are_written():
    parser = StreamingToolParser("hermes", TOOLS)
    got = [parser.feed(d) for d in ['<tool_call>{"name": "add", "arguments": {"a": 1', "2, ", '"b": ', "3}}"]]
    assert got[0] == []  # announced with its first argument value: `1` may still go on
    assert [type(e) for e in got[1]] == [ToolCallStart, ToolCallArgumentsDelta] and got[1][1].text == '{"a": 12'
    assert got[2] == []  # a key waits for its value
    assert [e.text for e in got[3]] == [', "b": 3}']
    [done] = parser.feed("</tool_call>")
    assert done.call.arguments == '{"a": 12, "b": 3}' and done.call.id == got[1][0].id


OPEN_ADD = '<tool_call>{"name": "add", "arguments": {"b": 2, '


@pytest.mark.parametrize("rest, arguments, why", [
    ('"a": NaN}}</tool_call>', '{"b": 2, "a": NaN}', "NaN is not JSON"),
    ('"a": -Infinity, "c": 3}}</tool_call>', '{"b": 2, "a": -Infinity, "c": 3}', "-Infinity is not JSON"),
    ('"a": 1e400, "c": 3}}</tool_call>', '{"b": 2, "a": 1e400, "c": 3}', "the number 1e400 is out of a double's range"),
    ('"a": NaN', '{"b": 2, "a": NaN', "NaN is not JSON"),  # cut off there: the stream ends
])
def test_a_value_json_cannot_carry_after_the_call_began_is_marked_not_dropped(rest, arguments, why):
    """Streamed: `{"b": 2` went out before NaN came, and cannot be taken back; the call ends as the
    model wrote it, nothing dropped, marked `unparsed` (the guard makes it an invalid_arguments
    problem). Not streamed (parse_tool_calls, test_formats): the same output stays text."""
    text = OPEN_ADD + rest
    for deltas in ([OPEN_ADD, rest], list(text)):
        events = stream(StreamingToolParser("hermes", TOOLS), deltas)
        [call] = [e.call for e in events if isinstance(e, ToolCallEvent)]
        sent = "".join(e.text for e in events if isinstance(e, ToolCallArgumentsDelta))
        assert sent == '{"b": 2' and call.arguments == arguments and call.unparsed == why
    assert parse_tool_calls(text, "hermes", TOOLS) == (text, [])


def test_a_repeated_key_after_the_call_began_reads_as_the_parse_does():
    """The certain prefix stops at a repeated key (json.loads keeps the last): the call ends as the
    model wrote it, which reads as the whole parse does, and is no unparsed call."""
    text = '<tool_call>{"name": "add", "arguments": {"a": 1, "a": 2}}</tool_call>'
    [call] = [e.call for e in stream(StreamingToolParser("hermes", TOOLS), list(text)) if isinstance(e, ToolCallEvent)]
    _, [whole] = parse_tool_calls(text, "hermes", TOOLS)
    assert call.arguments == '{"a": 1, "a": 2}' and json.loads(call.arguments) == json.loads(whole.arguments) == {"a": 2}
    assert call.unparsed == ""


def test_a_call_that_stops_parsing_keeps_what_was_sent():
    """Sent pieces cannot be taken back: a region that no longer parses is still the announced call."""
    parser = StreamingToolParser("hermes", TOOLS)
    events = stream(parser, ['<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2} {"bad": ', "1}</tool_call>"])
    [call] = [e.call for e in events if isinstance(e, ToolCallEvent)]
    sent = "".join(e.text for e in events if isinstance(e, ToolCallArgumentsDelta))
    assert call.name == "add" and call.arguments.startswith(sent) and json.loads(call.arguments) == {"a": 1, "b": 2}
    assert call.unparsed == ""  # the arguments are whole: only what follows them did not parse
