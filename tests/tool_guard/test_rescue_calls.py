"""Calls the model wrote without its format's markers, rescued into calls of offered tools only: a
table of outputs small models really write, and the parser wrapper whole and streamed."""

from __future__ import annotations

import json

import pytest

from hearth.tool_guard.guard_event import GuardLog
from hearth.tool_guard.rescue_calls import rescue_calls
from hearth.tool_guard.rescue_parser import RescuingParser
from hearth.tool_parsers import OutputParser, ToolCallEvent

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
TOOLS = [WEATHER, TIME]
PARIS = {"city": "Paris"}

# text -> (content left, [(name, arguments)], forms); None: no call may be made of it
CASES = [
    ('{{"name": "get_weather", "arguments": {"city": "Paris"}}}', ("", [("get_weather", PARIS)], ["doubled_braces"])),
    ('Sure! {{"name": "get_weather", "arguments": {"city": "Paris"}}}',
     ("Sure!", [("get_weather", PARIS)], ["doubled_braces"])),
    ('Let me look. {"name": "get_weather", "arguments": {"city": "Paris"}}',
     ("Let me look.", [("get_weather", PARIS)], ["json_in_prose"])),
    ('Here:\n```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```',
     ("Here:", [("get_weather", PARIS)], ["fenced_json"])),
    ("Checking {'name': 'get_weather', 'parameters': {'city': 'Paris',}}",
     ("Checking", [("get_weather", PARIS)], ["json_in_prose"])),
    ('{"get_weather": {"city": "Paris"}}', ("", [("get_weather", PARIS)], ["name_as_key"])),
    ('<function=get_weather>{"city": "Paris"}</function>', ("", [("get_weather", PARIS)], ["function_tag"])),
    ('Thought: I need the weather.\nAction: get_weather\nAction Input: {"city": "Paris"}',
     ("Thought: I need the weather.", [("get_weather", PARIS)], ["react"])),
    ('get_weather(city="Paris")', ("", [("get_weather", PARIS)], ["python_call"])),
    ('```python\nget_weather("Paris", days=3)\nget_time()\n```',
     ("", [("get_weather", {"city": "Paris", "days": 3}), ("get_time", {})], ["python_call", "python_call"])),
    ('<toolcall>{"name": "get_weather", "arguments": {"city": "Paris"}}</toolcall>',
     ("", [("get_weather", PARIS)], ["json_in_prose"])),
    ('A {"name": "get_time", "arguments": {}} and {"name": "get_weather", "arguments": {"city": "Paris"}}',
     ("A  and", [("get_time", {}), ("get_weather", PARIS)], ["json_in_prose", "json_in_prose"])),
    # the request's tool definitions echoed before the calls (Qwen2.5-Coder-0.5B, sampled, "weather in Paris
    # and in Rome?"): a definition is no call; read as get_weather({"type": ..., "properties": ...}) it failed
    # validation and the resample that followed lost the Rome call
    ('<tools>\n{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", '
     '"properties": {"city": {"type": "string"}}}}}\n</tools>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
     '{"name": "get_weather", "arguments": {"city": "Rome"}}',
     ('<tools>\n{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", '
      '"properties": {"city": {"type": "string"}}}}}\n</tools>', [("get_weather", PARIS), ("get_weather", {"city": "Rome"})],
      ["json_in_prose", "json_in_prose"])),
    ('{"name": "get_weather", "description": "the weather", "parameters": {"type": "object", "properties": {}}}', None),
    # a call ends its answer: one the answer goes on after was shown to the reader, not made (Qwen2.5-Coder-0.5B
    # greedy on BFCL irrelevance_207 and _39, where bare's text passes: docs/eval-tools.md, fifteenth session)
    ('To find it, you can use the `get_weather` function. Here\'s how you can do it:\n\n```json\n'
     '{"name": "get_weather", "arguments": {"city": "Paris"}}\n```\n\nThis function will return the weather.', None),
    ('Here is an example:\n```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```\n'
     '```json\n{"name": "book_flight", "arguments": {}}\n```\nIn this example, ...', None),
    ('I will look it up: {"name": "get_weather", "arguments": {"city": "Paris"}} now.', None),
    # ... and the answer that ends with its call stays one (issue 20 point 4), whatever prose comes before it
    ('1. The slope is 3.\n2. So the answer is:\n\n```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```\n',
     ('1. The slope is 3.\n2. So the answer is:', [("get_weather", PARIS)], ["fenced_json"])),
    ('Action: get_weather\nAction Input: {"city": "Paris"}\nObservation:', ("Observation:", [("get_weather", PARIS)], ["react"])),
    # an offered name with none of its tool's parameters is a function the model made up under that name
    # (Qwen2.5-Coder-0.5B, BFCL irrelevance_3, "the final answer is:"); one it shares is the tool's, checked later
    ('So the final answer is:\n```json\n{"name": "get_weather", "arguments": {"slope": -0.33}}\n```', None),
    ('get_weather(slope=-0.33)', None),
    ('So:\n```json\n{"name": "get_weather", "arguments": {"city": "Paris", "slope": 1}}\n```',
     ("So:", [("get_weather", {"city": "Paris", "slope": 1})], ["fenced_json"])),
    # never a call: a tool nobody offered, a call inside a sentence, plain prose, JSON that is no call
    ('{"name": "delete_everything", "arguments": {}}', None),
    ('{{"name": "rm_rf", "arguments": {}}}', None),
    ('You could call get_weather(city="Paris") yourself.', None),
    ("It is sunny in Paris today.", None),
    ('{"city": "Paris", "temperature": 21}', None),
    ('os.system("rm -rf /")', None),
    ('get_weather(city=open("secrets.txt").read())', None),
    # literals ast reads but JSON cannot hold or Python cannot build: not a call, never a 500
    ('get_weather(city={[1]: 2})', None),  # unhashable key: literal_eval raises TypeError
    ('get_weather(city={1, 2})', None),  # a set
    ('get_weather(city=b"Paris")', None),
    ('get_weather(city=1j)', None),
    ('get_weather(city=' + '[' * 300 + ']' * 300 + ')', None),  # nesting past the parser's limit
]


@pytest.mark.parametrize("text,expected", CASES)
def test_rescue_table(text, expected):
    found = rescue_calls(text, TOOLS)
    if expected is None:
        assert found is None
        return
    content, calls, forms = expected
    assert found is not None
    assert found.content == content
    assert [(c.name, json.loads(c.arguments)) for c in found.calls] == calls
    assert found.forms == forms


def test_no_tools_means_no_rescue():
    assert rescue_calls('{"name": "get_weather", "arguments": {}}', []) is None
    assert rescue_calls('{"name": "get_weather", "arguments": {}}', None) is None


def test_wrapper_turns_a_disguised_answer_into_a_call_and_logs_it():
    log = GuardLog()
    parsed = RescuingParser(OutputParser("hermes", TOOLS), TOOLS, log).parse(
        'The call: {{"name": "get_weather", "arguments": {"city": "Paris"}}}')
    assert parsed.content == "The call:" and [c.name for c in parsed.tool_calls] == ["get_weather"]
    assert [e.to_json() for e in log.events] == [{"kind": "rescued",
                                                  "calls": [{"name": "get_weather", "from": "doubled_braces"}]}]


def test_wrapper_leaves_marked_calls_and_prose_alone():
    log = GuardLog()
    parser = RescuingParser(OutputParser("hermes", TOOLS), TOOLS, log)
    marked = parser.parse('<tool_call>{"name": "get_time", "arguments": {}}</tool_call>')
    assert [c.name for c in marked.tool_calls] == ["get_time"]
    assert parser.parse("Just prose.").content == "Just prose." and not log.events


def test_wrapper_streamed_adds_the_call_at_the_end():
    log = GuardLog()
    parser = RescuingParser(OutputParser("hermes", TOOLS), TOOLS, log)
    events = []
    for piece in ['OK: {"name": "get_w', 'eather", "arguments": {"ci', 'ty": "Paris"}}']:
        events += parser.feed(piece)
    events += parser.finish()
    calls = [e for e in events if isinstance(e, ToolCallEvent)]
    assert len(calls) == 1 and calls[0].index == 0 and json.loads(calls[0].call.arguments) == PARIS
    assert [e.kind for e in log.events] == ["rescued"] and parser.rescue.content == "OK:"


@pytest.mark.parametrize("text", ['I will look it up: {"name": "get_weather", "arguments": {"city": "Pa',
                                  'Let me check. ```json\n{"name": "get_weather", "arguments": {"city": "Pa'])
def test_an_output_max_tokens_cut_is_not_rescued(text):
    """Rescue's lenient repair would close `"Pa` into a clean call the model never finished."""
    for announce in (False, True):
        log = GuardLog()
        parser = RescuingParser(OutputParser("hermes", TOOLS, announce=announce), TOOLS, log)
        events = parser.feed(text) + parser.finish(cut=True)
        assert not [e for e in events if isinstance(e, ToolCallEvent)] and not log.events and parser.rescue is None
        whole = RescuingParser(OutputParser("hermes", TOOLS), TOOLS, log).parse(text, cut=True)
        assert whole.content == text and not whole.tool_calls and not log.events


def test_wrapper_leaves_a_call_the_answer_goes_on_after_as_text():
    """Whole and streamed alike: no call, no event, the text as it was (what bare returns)."""
    text = 'You can use it like this: {"name": "get_weather", "arguments": {"city": "Paris"}}\nIt returns the weather.'
    log = GuardLog()
    parsed = RescuingParser(OutputParser("hermes", TOOLS), TOOLS, log).parse(text)
    assert parsed.content == text and not parsed.tool_calls
    parser = RescuingParser(OutputParser("hermes", TOOLS), TOOLS, log)
    events = [e for piece in (text[:30], text[30:]) for e in parser.feed(piece)] + parser.finish()
    assert not [e for e in events if isinstance(e, ToolCallEvent)] and parser.rescue is None and not log.events
