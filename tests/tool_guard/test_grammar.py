"""The lazy call grammar in llguidance, token by token over a byte-level vocabulary: free text until
a trigger, then one call of an offered tool with schema-valid arguments; the trigger matched when
a token straddles either of its ends; `<think>` free; parallel_tool_calls false ends after a call."""

from __future__ import annotations

import json

import pytest

from hearth.api.tools import anthropic_tools
from hearth.sample.grammar import GrammarCompiler
from hearth.sampling_params import StructuredOutput
from hearth.tool_guard import lazy_tool_grammar
from hearth.tool_parsers import call_constraint, schema_error
from tests.tool_guard.tiny_vocab import TinyTokenizer

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"], "additionalProperties": False}}}
ADD = {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "number"}}}}}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TOK = TinyTokenizer()
COMPILER = GrammarCompiler(TOK, TOK.vocab_size)


def matcher(**kw):
    grammar = lazy_tool_grammar(kw.pop("fmt", "hermes"), kw.pop("tools", [WEATHER, ADD]), **kw)
    return COMPILER.matcher(StructuredOutput(grammar=grammar))


def feed(m, ids: list[int]) -> bool:
    return all(m.accept(t) for t in ids)


def allowed(m) -> set[int]:
    mask = m.bitmask()
    return {w * 32 + b for w in range(len(mask) // 4) for b in range(32)
            if int.from_bytes(mask[4 * w:4 * w + 4], "little") >> b & 1}


def accepts(text: str, **kw) -> bool:
    m = matcher(**kw)
    return feed(m, TOK.encode(text)) and TOK.eos_id in allowed(m)


@pytest.mark.parametrize("text", [
    "Hello, no call here.",
    "Sure." + CALL,
    'Text with {"name": "Alice"} in the middle is free',
    '{"name": "get_weather", "arguments": {"city": "Paris"}}',
    '{{"name": "get_weather", "arguments": {"city": "Paris"}}}',  # Qwen2.5's doubled brace
    '```json\n{"name": "add", "arguments": {"a": 3}}\n```',
    '<function=add>{"a": 1.5}</function>',
    CALL + "\n" + CALL.replace("Paris", "Rome"),
])
def test_takes_text_and_valid_calls(text):
    assert accepts(text), text


@pytest.mark.parametrize("text", [
    '<tool_call>\n{"name": "get_wether", "arguments": {}}',  # no such tool
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": 3}}',  # a string is due
    '<tool_call>\n{"name": "get_weather", "arguments": {"town": "Paris"}}',  # additionalProperties false
    '<tool_call>\n{"name": "add", "arguments": {"a": "one"}}',  # a number is due
    '<tool_call>\n{{"name": "get_weather"',  # the doubled brace inside the tags
    '```json\n{"name": "nope"',
    CALL.replace('"Paris"', '"Paris", "days": 1' + '0' * 16),  # past 2**53: digits without end were taken
])
def test_refuses_calls_that_break_their_schema(text):
    m = matcher()
    assert not feed(m, TOK.encode(text)) or TOK.eos_id not in allowed(m)


# valid JSON Schema llguidance cannot enforce (pydantic writes uniqueItems for a set): left to the
# guard's validation, never a refused request
TAGS = {"type": "function", "function": {"name": "tag", "parameters": {"type": "object", "properties": {
    "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
    "name": {"type": "string", "not": {"const": ""}, "format": "no-such-format"},
    "id": {"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]}}}}}


def test_keywords_llguidance_cannot_enforce_leave_the_rest_enforced():
    call = '<tool_call>\n{"name": "tag", "arguments": {"tags": ["a", "b"], "name": "x", "id": "q"}}\n</tool_call>'
    assert accepts(call, tools=[TAGS])
    assert not accepts(call.replace('["a", "b"]', '[1]'), tools=[TAGS])  # items' type still holds
    forced = call_constraint("hermes", [TAGS], "required").lark()
    m = COMPILER.matcher(StructuredOutput(grammar=forced))
    assert feed(m, TOK.encode(call.removesuffix("</tool_call>").rstrip() + "\n</tool_call>"))


# a set of integers (pydantic's set[int]): uniqueItems only a lenient compile takes
COUNTS = {"type": "function", "function": {"name": "count", "parameters": {"type": "object", "properties": {
    "ns": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}}, "required": ["ns"]}}}


@pytest.mark.parametrize("forced", [False, True])
def test_a_tool_with_keywords_llguidance_cannot_enforce_keeps_its_bounded_numbers(forced):
    """The bounded copy was checked by a strict compile, which refused uniqueItems: the tool lost its bounds
    and took digits without end. It is checked as a call's arguments compile (lenient) now."""
    call = '<tool_call>\n{"name": "count", "arguments": {"ns": [1, %s]}}\n</tool_call>'
    assert _takes(call % "2", forced) and not _takes(call % ("1" + "0" * 17), forced)


def _takes(call: str, forced: bool) -> bool:
    if not forced:
        return accepts(call, tools=[COUNTS])
    m = COMPILER.matcher(StructuredOutput(grammar=call_constraint("hermes", [COUNTS], "required").lark()))
    return feed(m, TOK.encode(call)) and TOK.eos_id in allowed(m)


def test_a_tools_bounded_copy_is_compiled_once_for_its_requests(monkeypatch):
    """Agents send the same tools every turn: the check of a tool's bounded copy is the cached compile
    of schema_error, not one more compile a request (~1 ms for a schema with a number)."""
    import llguidance
    from hearth.tool_parsers import schema as tool_schema

    counted = _CountingMatcher(llguidance.LLMatcher)
    monkeypatch.setattr(llguidance, "LLMatcher", counted)
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "n": {"type": "integer"}, "unique_to_this_test": {"type": "number"}}}}}
    tool_schema._schema_error.cache_clear()
    for _ in range(3):
        lazy_tool_grammar("hermes", [tool])
        call_constraint("hermes", [tool], "required").lark()
    assert counted.compiles == 2  # the lazy grammar's arguments and the forced call's schema, once each


class _CountingMatcher:
    """llguidance.LLMatcher with its schema compiles counted."""

    def __init__(self, real):
        self.real, self.compiles = real, 0

    def __getattr__(self, name):
        return getattr(self.real, name)

    def validate_grammar(self, *a, **kw):
        self.compiles += 1
        return self.real.validate_grammar(*a, **kw)


def test_a_schema_requiring_an_undeclared_parameter_stays_open():
    """Closed, nothing would satisfy it: both grammars take it as given (a call, not a 400)."""
    odd = {"type": "function", "function": {"name": "odd", "parameters": {
        "type": "object", "properties": {"c": {"type": "string"}}, "required": ["b"]}}}
    assert schema_error(odd["function"]["parameters"]) is None
    call = '<tool_call>\n{"name": "odd", "arguments": {"c": "x", "b": 1}}\n</tool_call>'
    assert accepts(call, tools=[odd])
    forced = COMPILER.matcher(StructuredOutput(grammar=call_constraint("hermes", [odd], "required").lark()))
    assert feed(forced, TOK.encode(call))


def test_trigger_straddled_by_tokens_on_both_ends():
    m = matcher()
    # "Sure" ".<" "tool" "_call" ">\n{"": the first token begins before the trigger, the last ends after it
    ids = [TOK.id("Sure"), TOK.id(".<"), TOK.id("tool"), TOK.id("_call")]
    assert feed(m, ids)
    assert len(allowed(m)) > 100  # "<tool_call" is not yet the trigger: free text may still go on
    assert m.valid_prefix([ord("x")]) == 1
    assert feed(m, [TOK.id('>\n{"')])
    now = allowed(m)
    assert TOK.id("name") in now and ord("x") not in now and TOK.eos_id not in now  # inside the call


def test_trigger_as_one_token_then_only_the_call():
    m = matcher()
    assert feed(m, [TOK.id("Sure"), TOK.id("<tool_call>")])
    assert {TOK.pieces[t] for t in allowed(m)} <= {b" ", b"\t", b"\n", b"{", b'{"', b'>\n{"'[2:]}


def test_think_region_stays_free():
    text = "<think>I could write <tool_call> and {garbage here</think>Done."
    assert not accepts(text)  # without a reasoning channel <tool_call> starts a call
    assert accepts(text, reasoning=True)
    assert accepts("<think>ok</think>" + CALL, reasoning=True)
    assert not accepts('<think>ok</think><tool_call>\n{"name": "nope"', reasoning=True)
    # the prompt opened <think>: free until it closes, a call after
    assert accepts("still <tool_call> thinking", starts_in_reasoning=True)
    assert accepts("done</think>" + CALL, starts_in_reasoning=True)
    assert not accepts('done</think><tool_call>\n{"name": "nope"', starts_in_reasoning=True)


def test_parallel_false_ends_after_one_call():
    m = matcher(parallel=False)
    assert feed(m, TOK.encode("Sure." + CALL))
    assert TOK.eos_id in allowed(m) and ord("x") not in allowed(m) and TOK.id("<tool_call>") not in allowed(m)
    assert accepts(CALL + "\n" + CALL)
    assert not accepts(CALL + "\n" + CALL, parallel=False)


def test_only_the_given_tools_are_callable():
    assert not accepts('<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>', tools=[WEATHER])
    assert accepts(CALL, tools=[WEATHER])


def test_formats_without_triggers_or_tools_get_none():
    assert lazy_tool_grammar("mistral", [WEATHER]) is None
    assert lazy_tool_grammar("hermes", []) is None
    assert accepts('{"name": "get_weather", "parameters": {"city": "Paris"}}', fmt="llama3_json")
    assert not accepts('{"name": "get_weather", "arguments": {"city": "Paris"}}', fmt="llama3_json")


def test_undeclared_parameters_are_refused():
    echo = '<tool_call>\n{"name": "add", "arguments": {"type": "object"}}\n</tool_call>'
    assert not accepts(echo)  # add declares only `a`
    assert accepts('<tool_call>\n{"name": "add", "arguments": {"a": 2}}\n</tool_call>')


FENCED = '```json\n{"name": "add", "arguments": {"a": 1}}\n```'


def test_after_a_leading_call_the_formats_own_calls_or_free_text():
    """A call written the lead's way (a fence, doubled braces) is one call; after it, calls in the
    format's own tags are held to their schemas, and other text (a JSON object the model adds) stays free."""
    assert accepts(FENCED + "\n" + CALL)
    assert not accepts(FENCED + '\n<tool_call>\n{"name": "add", "arguments": {"a": "one"}}\n</tool_call>')
    assert accepts(FENCED + '\n{"response": "2"}')
    assert accepts(FENCED + "\nThat adds one.")


@pytest.mark.parametrize("days,ok", [("7", True), ("1" + "0" * 16, False)])
def test_a_forced_call_s_integers_end_within_a_safe_integer(days, ok):
    """tool_choice required: digits without end were taken there too."""
    forced = COMPILER.matcher(StructuredOutput(grammar=call_constraint("hermes", [WEATHER], "required").lark()))
    call = CALL.replace('"Paris"', f'"Paris", "days": {days}')
    assert (feed(forced, TOK.encode(call)) and TOK.eos_id in allowed(forced)) == ok


@pytest.mark.parametrize("number,ok", [("0." + "3" * 10, True), ("0." + "3" * 11, False), ("9" * 15, True),
                                       ("1" + "0" * 15, False), ("-" + "9" * 15 + ".5", True)])
def test_a_number_argument_ends_within_15_integer_and_10_fraction_digits(number, ok):
    """A float's digits without end were taken (`0.333...` until max_tokens): the digit past the bound is
    refused where it is written, in the lazy grammar and a forced call's."""
    text = '<tool_call>\n{"name": "add", "arguments": {"a": ' + number
    assert feed(matcher(), TOK.encode(text)) == ok
    forced = COMPILER.matcher(StructuredOutput(grammar=call_constraint("hermes", [ADD], "required").lark()))
    assert feed(forced, TOK.encode(text)) == ok


@pytest.mark.parametrize("number,ok", [("12.57e10", True), ("-1.5E-07", True), ("1e+99", True), ("1e999", False),
                                       ("1.5e", False), ("1" + "0" * 15 + "e1", False)])
def test_a_number_argument_keeps_its_exponent(number, ok):
    """The bounded number had none: the grammar ended `12.57e10` at the `e` and the call carried 12.57
    (BFCL simple_python_40 in guard mode, both Qwen2.5-Coder models). Bounded in digits, exponent included."""
    text = '<tool_call>\n{"name": "add", "arguments": {"a": ' + number + "}}\n</tool_call>"
    assert accepts(text) == ok
    forced = COMPILER.matcher(StructuredOutput(grammar=call_constraint("hermes", [ADD], "required").lark()))
    assert (feed(forced, TOK.encode(text)) and TOK.eos_id in allowed(forced)) == ok


@pytest.mark.parametrize("number,ok", [("6.626e-27", True), ("-0.5E3", True), ("1e", False), ("01", False)])
def test_a_number_under_a_ref_keeps_its_exponent(number, ok):
    """A tool whose parameters refer to their `$defs` (a pydantic model's nested one) was one `%json`, whose
    bounded numbers have no exponent."""
    from tests.tool_parsers.test_schema import MEASURE
    text = '<tool_call>\n{"name": "measure", "arguments": {"mass": {"value": ' + number + "}}}\n</tool_call>"
    assert accepts(text, tools=[MEASURE, ADD]) == ok
    forced = COMPILER.matcher(StructuredOutput(grammar=call_constraint("hermes", [MEASURE, ADD], "required").lark()))
    assert (feed(forced, TOK.encode(text)) and TOK.eos_id in allowed(forced)) == ok


def test_an_anthropic_client_tools_documented_schema_constrains_its_calls():
    """The text editor sent as a type and a name (no input_schema) gets its documented schema: the call
    grammar takes a valid call and refuses one without the required `path` or with an unknown command."""
    editor = anthropic_tools([{"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"}])
    call = '<tool_call>\n{"name": "str_replace_based_edit_tool", "arguments": %s}\n</tool_call>'
    assert accepts(call % '{"command": "view", "path": "a.py", "view_range": [1, 20]}', tools=editor)
    assert not accepts(call % '{"command": "view"}', tools=editor)
    assert not accepts(call % '{"command": "undo_edit", "path": "a.py"}', tools=editor)
    assert not accepts(call % '{"command": "view", "path": "a.py", "view_range": [1]}', tools=editor)


GEMMA_CALL = '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:2}<tool_call|>'


@pytest.mark.parametrize("text, ok", [
    ("Free text, then " + GEMMA_CALL, True),
    (GEMMA_CALL + GEMMA_CALL.replace("Paris", "Rome"), True),
    ('<|tool_call>call:add{a:1.5}<tool_call|>', True),
    ('<|tool_call>call:get_weather{city:2}<tool_call|>', False),  # an integer for a string
    ('<|tool_call>call:get_weather{town:<|"|>Paris<|"|>}<tool_call|>', False),
    ('<|tool_call>call:nope{}<tool_call|>', False),
    ('<|tool_call>call:add{a:1e999}<tool_call|>', False),  # read back as no number
    ('<|tool_call>call:get_weather{city:<|"|>P<|"|>,more:1}<tool_call|>', False),  # the tool's arguments are closed
    ("<|channel>thought\nI could write <|tool_call>call:x{<channel|>" + GEMMA_CALL, True),  # a thought stays free
])
def test_gemma4_calls_are_constrained_once_they_start(text, ok):
    assert accepts(text, fmt="gemma4", reasoning=True) == ok
    assert accepts(GEMMA_CALL, fmt="gemma4", parallel=False) and not accepts(GEMMA_CALL * 2, fmt="gemma4", parallel=False)


AREA = {"type": "function", "function": {"name": "area", "parameters": {"type": "object", "properties": {
    "shape": {"type": "string"}, "dims": {"type": "object", "properties": {
        "width": {"type": "integer"}, "height": {"type": "number"}}, "required": ["width", "height"]}},
    "required": ["dims"]}}}


@pytest.mark.parametrize("indent", [None, 2, 4, "\t"])
def test_a_pretty_printed_call_is_taken(indent):
    """A newline and 4 spaces before a nested member were refused (at most 4 whitespace characters a gap):
    the 1.5B then wrote `"area": {}` and the 0.5B the parameter's schema (BFCL simple_python_260, guard mode)."""
    call = {"name": "area", "arguments": {"shape": "rect", "dims": {"width": 20, "height": 1.2e1}}}
    text = "<tool_call>\n" + json.dumps(call, indent=indent) + "\n</tool_call>"
    assert accepts(text, tools=[AREA])
    forced = COMPILER.matcher(StructuredOutput(grammar=call_constraint("hermes", [AREA], "required").lark()))
    assert feed(forced, TOK.encode(text)) and TOK.eos_id in allowed(forced)


@pytest.mark.parametrize("gap", ["\n\n\n", " " * 5, "\n" + " " * 21])
def test_a_calls_layout_stays_bounded(gap):
    text = '<tool_call>\n{"name": "area", "arguments": {' + gap + '"dims": {"width": 1, "height": 2}}}\n</tool_call>'
    assert not accepts(text, tools=[AREA])
