"""The schema for a forced call accepts exactly the calls tool_choice allows, and the grammar built
from it makes llguidance produce text the format's parser reads back as that call."""

from __future__ import annotations

import json

import jsonschema
import pytest
from llguidance import LLMatcher, LLTokenizer, TokenizerWrapper

from hearth.tool_parsers import (FORMATS, ToolParserError, call_constraint, forced_tools,
                                 parse_tool_calls, tool_call_schema)
from tests.tool_parsers.cases import ANTHROPIC_TOOLS, TOOLS

ADD = {"name": "add", "arguments": {"a": 1, "b": 2}}
WEATHER = {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}
NAMED_ADD = {"type": "function", "function": {"name": "add"}}
# tool_choice -> calls the schema must accept, calls it must refuse
SCHEMA_CASES = [
    ("required", [ADD, WEATHER],
     [{"name": "add", "arguments": {"city": "Paris", "unit": "c"}},  # one tool's name, another's args
      {"name": "nope", "arguments": {}}, {"name": "add"}, {"arguments": {"a": 1, "b": 2}},
      {**ADD, "extra": 1}, {"name": "add", "arguments": {"a": "1", "b": 2}}]),
    ({"type": "any"}, [ADD, WEATHER], [{"name": "nope", "arguments": {}}]),
    (NAMED_ADD, [ADD], [WEATHER, {"name": "add", "arguments": {"a": 1}}]),
    ({"type": "tool", "name": "get_weather"}, [WEATHER],
     [ADD, {**WEATHER, "arguments": {"city": "P", "unit": "k"}}]),
]


@pytest.mark.parametrize("choice, valid, invalid", SCHEMA_CASES)
def test_schema_accepts_what_the_choice_allows(choice, valid, invalid):
    schema = tool_call_schema(TOOLS, choice)
    jsonschema.Draft202012Validator.check_schema(schema)
    for call in valid:
        jsonschema.validate(call, schema)
    for call in invalid:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(call, schema)


def test_anthropic_tools_and_llama_key():
    schema = tool_call_schema(ANTHROPIC_TOOLS, {"type": "any"}, arguments_key="parameters")
    jsonschema.validate({"name": "add", "parameters": {"a": 1, "b": 2}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(ADD, schema)


@pytest.mark.parametrize("choice", ["auto", "none", None, {"type": "auto"}])
def test_free_choices_force_nothing(choice):
    assert forced_tools(TOOLS, choice) is None
    with pytest.raises(ToolParserError, match="forces no call"):
        tool_call_schema(TOOLS, choice)


def test_a_choice_naming_no_tool_is_a_clear_error():
    with pytest.raises(ToolParserError, match="'nope', which is not one of the tools"):
        forced_tools(TOOLS, {"type": "function", "function": {"name": "nope"}})


@pytest.mark.parametrize("choice,where", [({"type": "function"}, "function.name"),
                                           ({"type": "function", "function": {}}, "function.name"),
                                           ({"type": "tool"}, "name"), ({"type": "tool", "name": 5}, "name")])
def test_a_named_choice_without_a_name_says_where_the_name_goes(choice, where):
    """`{"type": "function"}` alone read "tool_choice names None, which is not one of the tools"."""
    with pytest.raises(ToolParserError, match=f"needs the tool's name in {where} for type"):
        forced_tools(TOOLS, choice)


class _Bytes:
    """A tokenizer with one token per byte, so the grammar is checked on text alone."""
    eos_token_id, bos_token_id, special_token_ids = 256, None, [256]
    tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]

    def __call__(self, text):
        return list(text.encode() if isinstance(text, str) else text)


@pytest.fixture(scope="module")
def byte_tokenizer():
    return LLTokenizer(TokenizerWrapper(_Bytes()))


def _accepts(tokenizer, grammar: str, text: str) -> bool:
    matcher = LLMatcher(tokenizer, grammar)
    tokens = list(text.encode())
    return matcher.try_consume_tokens(tokens) == len(tokens) and matcher.is_accepting()


@pytest.mark.parametrize("fmt", FORMATS)
def test_grammar_output_parses_back(fmt, byte_tokenizer):
    constraint = call_constraint(fmt, TOOLS, "required")
    grammar = constraint.lark()
    assert LLMatcher.validate_grammar(grammar, byte_tokenizer) == ""
    good = constraint.call_text("add", {"a": 1, "b": 2})
    bad = constraint.call_text("add", {"a": "x"})
    assert _accepts(byte_tokenizer, grammar, good) and not _accepts(byte_tokenizer, grammar, bad)
    content, calls = parse_tool_calls(good, fmt, TOOLS)
    assert content == "" and [(c.name, json.loads(c.arguments)) for c in calls] == [("add", {"a": 1, "b": 2})]


BOOK = [{"type": "function", "function": {"name": "book", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "nights": {"type": "integer"}, "unit": {"type": "string", "enum": ["c", "f"]},
    "rooms": {"type": "array", "items": {"type": "object", "properties": {"beds": {"type": "integer"}}}},
    "flexible": {"type": "boolean"}, "note": {}}}}}] + TOOLS


@pytest.mark.parametrize("text, ok", [
    ('<|tool_call>call:book{city:<|"|>Paris, FR<|"|>,nights:2,unit:<|"|>c<|"|>}<tool_call|>', True),
    ('<|tool_call>call:book{flexible:true,note:{any:[1,<|"|>x<|"|>]},rooms:[{beds:2},{beds:1}]}<tool_call|>', True),
    ('<|tool_call>call:book{rooms:[{beds:2}],flexible:true}<tool_call|>', False),  # not the template's sorted order
    ('<|channel>thought\nBook it.<channel|><|tool_call>call:book{}<tool_call|>', True),
    ('<|tool_call>call:book{nights:<|"|>2<|"|>}<tool_call|>', False),  # a string for an integer
    ('<|tool_call>call:book{unit:<|"|>k<|"|>}<tool_call|>', False),  # not one of the enum
    ('<|tool_call>call:book{town:<|"|>Paris<|"|>}<tool_call|>', False),  # a key the tool does not declare
    ('<|tool_call>call:book{rooms:[{beds:<|"|>two<|"|>}]}<tool_call|>', False),
    ('<|tool_call>call:add{a:1,b:2}<tool_call|>', False),  # tool_choice names book
    ('Sure. <|tool_call>call:book{}<tool_call|>', False),
    ('<|tool_call>call:book{nights:1e999}<tool_call|>', False),  # no exponent: 1e999 reads back as no number
    ('<|tool_call>call:book{nights:12345678901234567}<tool_call|>', False),  # past 16 digits
    ('<|tool_call>call:book{nights:1234567890123456}<tool_call|>', True),
    ('<|tool_call>call:book{note:{x:None,y:-0.5}}<tool_call|>', True),  # Jinja writes None
    ('<|tool_call>call:book{note:{y:0.12345678901}}<tool_call|>', False),  # past 10 fraction digits
])
def test_a_forced_gemma4_call_follows_each_declared_keys_type(byte_tokenizer, text, ok):
    grammar = call_constraint("gemma4", BOOK, {"type": "function", "function": {"name": "book"}}).lark()
    assert _accepts(byte_tokenizer, grammar, text) == ok



@pytest.mark.parametrize("params, text, ok", [
    ({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": True},
     'a:<|"|>x<|"|>,b:1', True),  # open, as the tool says
    ({"type": "object", "properties": {"q": {"type": "object", "properties": {"a": {"type": "string"}}}}},
     'q:{a:<|"|>x<|"|>,b:1}', True),  # a nested object is open unless it says otherwise
    ({"type": "object", "properties": {"q": {"type": "object", "properties": {}, "additionalProperties": False}}},
     "q:{b:1}", False),
    ({"type": "object", "properties": {}}, "b:1", False),  # the tool's own arguments: its declared keys only
    ({"type": "object", "properties": {}}, "", True),
    ({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]},
     "", False),  # a required key missing (a random Gemma 4 wrote {} under tool_choice required)
    ({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]},
     "days:2", False),
    ({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]},
     'city:<|"|>P<|"|>', True),
    ({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]},
     'city:<|"|>P<|"|>,days:2', True),
])
def test_a_forced_gemma4_call_s_objects_are_open_or_closed_as_the_json_formats(byte_tokenizer, params, text, ok):
    tools = [{"type": "function", "function": {"name": "f", "parameters": params}}]
    grammar = call_constraint("gemma4", tools, "required").lark()
    assert _accepts(byte_tokenizer, grammar, f"<|tool_call>call:f{{{text}}}<tool_call|>") == ok


@pytest.mark.parametrize("open_", [False, True])
def test_a_gemma4_call_grammar_grows_linearly_with_optional_keys(byte_tokenizer, open_):
    """Each optional key once doubled the text of the keys after it: 16 were an invalid grammar (llguidance's
    nesting limit), 24 a 327 MB one (an MCP tool has as many)."""
    def grammar(n):
        keys = {f"k{i:02}": {"type": "object" if i == 0 else "integer", "properties": {
            f"n{j:02}": {"type": "string"} for j in range(n)}} if i == 0 else {"type": "integer"} for i in range(n)}
        params = {"type": "object", "properties": keys, "required": ["k05"], "additionalProperties": open_}
        return call_constraint("gemma4", [{"type": "function", "function": {"name": "f", "parameters": params}}],
                               "required").lark()

    assert len(grammar(16)) < 2.5 * len(grammar(8))  # before the 40 keys, which that doubling never wrote out
    big = grammar(40)
    assert LLMatcher.validate_grammar(big, byte_tokenizer) == ""
    call = "<|tool_call>call:f{%s}<tool_call|>"
    assert _accepts(byte_tokenizer, big, call % 'k00:{n03:<|"|>x<|"|>,n39:<|"|>y<|"|>},k05:1,k39:2')
    assert _accepts(byte_tokenizer, big, call % "k05:1")
    assert not _accepts(byte_tokenizer, big, call % "k04:1")  # k05 is required
    for other in ("zz:2", "k03:2"):  # another key, or a declared one out of the template's order: open objects only
        assert _accepts(byte_tokenizer, big, call % f"k05:1,{other}") == open_


PERMEABILITY = [{"type": "function", "function": {"name": "field", "parameters": {"type": "object", "properties": {
    "permeability": {"type": "number", "description": "in H/m"}, "turns": {"type": "integer"},
    "core": {"type": "object", "properties": {"mu": {"type": "number"}}, "required": ["mu"],
             "additionalProperties": False}},
    "required": ["permeability"]}}}] + TOOLS


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "gemma4"])  # gemma4's arguments are not JSON
@pytest.mark.parametrize("arguments, ok", [
    ('{"permeability": 12.57e10}', True),  # was cut at the `e`: 12.57, off by 10^10 (BFCL simple_python_40)
    ('{"permeability": -1.5E-7, "turns": 3, "core": {"mu": 4e-07}}', True),
    ('{"permeability": 1e999}', False),  # an exponent of two digits: a double's range, never inf
    ('{"permeability": 1' + "0" * 16 + "}", False),  # past 15 integer digits, as without an exponent
    ('{"permeability": 0.12345678901}', False),  # past 10 fraction digits
    ('{"turns": 3}', False),  # a required member missing
    ('{"turns": 3, "permeability": 1}', False),  # llguidance's order: the schema's
    ('{"permeability": 1, "volts": 2}', False),  # a member the tool does not declare
    ('{"permeability": 1, "turns": 1e3}', False),  # an integer takes no exponent
])
def test_a_forced_calls_numbers_keep_their_exponent(byte_tokenizer, fmt, arguments, ok):
    constraint = call_constraint(fmt, PERMEABILITY, {"type": "function", "function": {"name": "field"}})
    grammar = constraint.lark()
    text = constraint.call_text("field", {}).replace("{}", arguments)
    assert _accepts(byte_tokenizer, grammar, text) == ok, text
    if ok:
        _, calls = parse_tool_calls(text, fmt, PERMEABILITY)
        assert [json.loads(c.arguments) for c in calls] == [json.loads(arguments)]


FIT = [{"type": "function", "function": {"name": "fit", "parameters": {"type": "object", "properties": {
    "options": {"type": "object"}, "extra": {"type": "object", "properties": {"k": {"type": "number", "minimum": 0}}},
    "data": {}}, "required": ["options"]}}}]


@pytest.mark.parametrize("arguments, ok", [
    ('{"options": {"tol": 1e-9, "steps": [1.5E+3, {"w": -0.5e3}]}}', True),  # any object's numbers: were unbounded
    ('{"options": {}, "extra": {"k": 2.5, "z": 6.626e-27}, "data": 12.57e10}', True),  # an open object's others
    ('{"options": {\n    "tol": 1e-9\n}}', True),  # the call's layout inside any value too
    ('{"options": {"tol": 1e999}}', False), ('{"options": {"tol": 01}}', False), ('{"options": {}, "data": 1e}', False),
    ('{"options": {"tol": ' + "1" * 16 + "}}", False),  # bounded in digits as a plain number is
    ('{"options": {}, "extra": {"k": -1}}', False),  # a bound given is kept
    ('{"options": {}, "extra": {"z": 1, "k": 2}}', False),  # an open object's properties come first
    ('{"options": {}, "volts": 2}', False),  # the arguments themselves are closed (declared_only)
])
def test_a_forced_calls_untyped_values_take_bounded_numbers_with_an_exponent(byte_tokenizer, arguments, ok):
    """Any JSON (`{"type": "object"}`, `{}`) and an open object's other members took llguidance's unbounded
    number (1e999 is inf); they take JSON_NUMBER now, and a number of the open object's properties keeps its own."""
    constraint = call_constraint("hermes", FIT, "required")
    text = constraint.call_text("fit", {}).replace("{}", arguments, 1)
    assert _accepts(byte_tokenizer, constraint.lark(), text) == ok, text


_QUANTITY = {"properties": {"value": {"type": "number"}, "unit": {"type": "string"}}, "required": ["value"],
             "title": "Quantity", "type": "object"}
MEASURE = {"type": "function", "function": {"name": "measure", "parameters": {  # as pydantic writes a nested model
    "$defs": {"Quantity": _QUANTITY}, "properties": {"mass": {"$ref": "#/$defs/Quantity"},
                                                    "parts": {"type": "array", "items": {"$ref": "#/$defs/Quantity"}}},
    "required": ["mass"], "title": "Measure", "type": "object"}}}


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "measure"}}])
@pytest.mark.parametrize("arguments, ok", [
    ('{"mass": {"value": 6.626e-27, "unit": "kg"}}', True),
    ('{"mass": {"value": 1}, "parts": [{"value": -0.5e3}]}', True),
    ('{"mass": {"value": 1e}}', False), ('{"mass": {"value": .5}}', False), ('{"mass": {"unit": "kg"}}', False),
    ('{"mass": 3}', False),
])
def test_a_forced_call_of_a_tool_with_definitions(byte_tokenizer, choice, arguments, ok):
    """The arguments' `#/$defs/...` named nothing once they stood under the call object's `arguments`: llguidance
    refused the grammar ("Pointer '/$defs/Quantity' does not exist"), tool_choice required or named alike.
    Their numbers keep the exponent."""
    tools = [MEASURE, *TOOLS]
    constraint = call_constraint("hermes", tools, choice)
    text = constraint.call_text("measure", {}).replace("{}", arguments, 1)
    assert _accepts(byte_tokenizer, constraint.lark(), text) == ok, text
    schema = tool_call_schema(tools, choice)  # the call object's schema is a document its refs resolve in
    jsonschema.Draft202012Validator.check_schema(schema)
    if not arguments.endswith(("1e}}", ".5}}")):  # JSON
        call = {"name": "measure", "arguments": json.loads(arguments)}
        assert jsonschema.Draft202012Validator(schema).is_valid(call) == ok
