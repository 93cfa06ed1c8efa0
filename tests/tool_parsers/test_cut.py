"""An output max_tokens cut off inside (or, when a call is forced, before) a tool call
(hearth.tool_parsers.cut): the call as written so far, never repaired into one the model did not
finish, never its markup as content; streamed (every split, announced or not) as parsed whole."""

from __future__ import annotations

import zlib

import pytest

from hearth.tool_parsers import ContentDelta, StreamingToolParser, collect
from hearth.tool_parsers.cut import CUT
from hearth.tool_parsers.lenient_json import cut_off
from tests.tool_parsers.splits import splits

TOOLS = [{"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}}]
AUTO, REQUIRED, NAMED = {}, {"required": True}, {"named": "get_time"}
ASIA = '{"tz": "Asia/To'

# (format, text the model wrote before max_tokens, tool_choice) -> (content, [(name, arguments, cut)])
CASES = [
    # not even the name: a named choice's tool is the call; required or a START-opened region: nothing
    ("hermes", "<tool_", NAMED, "", [("get_time", "", True)]),
    ("hermes", "<tool_", REQUIRED, "", []),
    ("hermes", "<tool_", AUTO, "<tool_", []),  # not known to be a call
    ("hermes", '<tool_call>\n{"name": "get_', NAMED, "", [("get_time", "", True)]),
    ("hermes", '<tool_call>\n{"name": "get_', REQUIRED, "", []),
    ("hermes", 'Sure. <tool_call>\n{"name": "get_', AUTO, "Sure.", []),
    ("hermes", "<tool_call>\n", NAMED, "", [("get_time", "", True)]),
    # the name whole: its call, the arguments as far as written ({ is not {})
    ("hermes", '<tool_call>\n{"name": "get_time"', REQUIRED, "", [("get_time", "", True)]),
    ("hermes", '<tool_call>\n{"name": "get_time", "arguments": {', REQUIRED, "", [("get_time", "{", True)]),
    ("hermes", '<tool_call>\n{"name": "get_time", "arguments": {\n   "', NAMED, "", [("get_time", '{\n   "', True)]),
    ("hermes", '<tool_call>\n{"name": "get_time", "arguments": {\n   "', AUTO, "", [("get_time", '{\n   "', True)]),
    ("hermes", '<tool_call>\n{"name": "get_time", "arguments": {"tz": "Asia/To', AUTO, "",
     [("get_time", '{"tz": "Asia/To', True)]),
    ("hermes", 'Hm. <tool_call>\n{{"name": "get_time", "arguments": {"tz":"Asia/Tokyo"}', AUTO, "Hm.",
     [("get_time", '{"tz": "Asia/Tokyo"}', False)]),  # doubled brace: the arguments are whole
    # whole but for the END marker: parsed as usual
    ("hermes", '<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"}}\n</tool', NAMED, "",
     [("get_time", '{"tz": "UTC"}', False)]),
    # an offered tool only (auto); a lead region of auto that names none stays the text it was
    ("hermes", '<tool_call>\n{"name": "get_date", "arguments": {"d', AUTO, "", []),
    ("bare_json", '{"answer": "It is no', AUTO, '{"answer": "It is no', []),
    ("bare_json", '{"name": "get_ti', REQUIRED, "", []),
    ("bare_json", '{"name": "get_ti', NAMED, "", [("get_time", "", True)]),
    ("llama3_json", '{"name": "get_time", "parameters": {"tz": "E', AUTO, "", [("get_time", '{"tz": "E', True)]),
    ("mistral", '[TOOL_CALLS][{"name": "get_time", "arguments": {"tz": ', REQUIRED, "", [("get_time", '{"tz": ', True)]),
    ("hermes", "<tool_call>\n<function=get_ti", NAMED, "", [("get_time", "", True)]),
    # several calls in one region (a list, `;`): the whole ones, then the cut one as written
    ("mistral", '[TOOL_CALLS][{"name": "get_time", "arguments": {"tz": "UTC"}}, {"name": "get_time", "arguments": {"tz": "Asia/To',
     AUTO, "", [("get_time", '{"tz": "UTC"}', False), ("get_time", ASIA, True)]),
    ("bare_json", '[{"name": "get_time", "arguments": {"tz": "UTC"}}, {"name": "get_time", "arguments": {"tz": "Asia/To',
     REQUIRED, "", [("get_time", '{"tz": "UTC"}', False), ("get_time", ASIA, True)]),
    ("llama3_json", '{"name": "get_time", "parameters": {"tz": "UTC"}}; {"name": "get_time", "parameters": {"tz": "Asia/To',
     NAMED, "", [("get_time", '{"tz": "UTC"}', False), ("get_time", ASIA, True)]),
    ("mistral", '[TOOL_CALLS][{"name": "get_time", "arguments": {"tz": "UTC"}}, {"name": "get_ti', NAMED, "",
     [("get_time", '{"tz": "UTC"}', False)]),  # the second's name unfinished: no call is invented
    ("hermes", '<tool_call>\n[{"name": "get_time", "arguments": {"tz": "UTC"}}, {"name": "get_time", "arguments": {',
     AUTO, "", [("get_time", '{"tz": "UTC"}', False), ("get_time", "{", True)]),
    # XML bodies: a function without </function> is cut, its open parameter as a JSON string's start
    ("hermes", "<tool_call>\n<function=get_time>\n<parameter=tz>\nAsia/To", AUTO, "", [("get_time", ASIA, True)]),
    ("qwen_xml", "<tool_call>\n<function=get_time>\n<parameter=tz>\nAsia/To", REQUIRED, "", [("get_time", ASIA, True)]),
    ("hermes", "<function=get_time>\n<parameter=tz>\nAsia/To", AUTO, "", [("get_time", ASIA, True)]),
    ("qwen_xml", "<tool_call>\n<function=get_time>\n", NAMED, "", [("get_time", "", True)]),
    ("qwen_xml", "<tool_call>\n<function=get_time>\n<parameter=t", AUTO, "", [("get_time", "{", True)]),
    ("qwen_xml", "<tool_call>\n<function=get_time>\n<parameter=tz>\nUTC\n</parameter>\n", AUTO, "",
     [("get_time", '{"tz": "UTC"', True)]),
    ("qwen_xml", "<tool_call>\n<function=get_time>\n<parameter=tz>\nUTC\n</parameter>\n</function>\n</tool", AUTO, "",
     [("get_time", '{"tz": "UTC"}', False)]),
    # gemma4: its arguments are not JSON: the name once whole (its `{` written), no arguments
    ("gemma4", '<|tool_call>call:get_time{tz:<|"|>Asia/To', AUTO, "", [("get_time", "", True)]),
    ("gemma4", "<|tool_call>call:get_ti", NAMED, "", [("get_time", "", True)]),
    ("gemma4", "<|tool_call>call:get_ti", REQUIRED, "", []),
    ("gemma4", 'Sure. <|tool_call>call:get_time{tz:<|"|>UTC<|"|>}', AUTO, "Sure.", [("get_time", '{"tz": "UTC"}', False)]),
    # harmony: the header names the call; its body as far as written
    ("harmony", '<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{"tz": "Asia/To', AUTO, "",
     [("get_time", ASIA, True)]),
    ("harmony", "<|channel|>commentary to=functions.get_ti", NAMED, "", [("get_time", "", True)]),
    ("harmony", "<|channel|>commentary to=functions.get_ti", REQUIRED, "", []),
    ("harmony", "<|channel|>analysis<|message|>Think", AUTO, "", []),
    ("harmony", '<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{"tz": "UTC"}', NAMED, "",
     [("get_time", '{"tz": "UTC"}', False)]),
]


def _run(fmt, deltas, choice, announce, cut=True):
    parser = StreamingToolParser(fmt, TOOLS, announce, **choice)
    events = []
    for d in deltas:
        events += parser.feed(d)
    return events + parser.finish(cut)


@pytest.mark.parametrize("fmt,text,choice,content,calls", CASES)
def test_a_cut_call_is_the_call_as_written(fmt, text, choice, content, calls):
    for announce in (False, True):
        for deltas in splits(text, seed=zlib.crc32(text.encode()), n_random=5):
            events = _run(fmt, deltas, choice, announce)
            got = collect(events)
            assert got.content == content, (announce, deltas)
            assert [(c.name, c.arguments, c.unparsed == CUT) for c in got.tool_calls] == calls, (announce, deltas)
            assert all(c.unparsed in ("", CUT) for c in got.tool_calls)
            assert not any(isinstance(e, ContentDelta) and "<tool_call>" in e.text for e in events)


def test_a_stream_that_ends_without_a_cut_is_parsed_as_before():
    """finish() without cut (an end-of-turn or a stop string): lenient repair closes the call, as it did."""
    got = collect(_run("hermes", ['<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"'], AUTO, False, cut=False))
    assert [(c.name, c.arguments) for c in got.tool_calls] == [("get_time", '{"tz": "UTC"}')]
    got = collect(_run("hermes", ["<tool_"], NAMED, False, cut=False))
    assert got.content == "<tool_" and not got.tool_calls


def test_the_streamed_pieces_are_a_prefix_of_the_cut_arguments():
    events = _run("hermes", ['<tool_call>\n{"name": "get_time", "arguments": {"tz"', ': "Asia', "/To"], AUTO, True)
    pieces = "".join(e.text for e in events if type(e).__name__ == "ToolCallArgumentsDelta")
    (call,) = collect(events).tool_calls
    assert pieces and call.arguments.startswith(pieces) and call.arguments == '{"tz": "Asia/To'


@pytest.mark.parametrize("text,cut", [('{"a": 1}', False), ('{"a": [1, 2]', True), ('{"a": "}', True),
                                      ("```json\n{\"a\": {}}\n```", False), ('{"a": 1} [', True), ("text", False)])
def test_cut_off(text, cut):
    assert cut_off(text) is cut
