"""Which calls the grammar holds (hearth.tool_guard.held), checked against the grammar itself:
llguidance over a byte-level vocabulary, the lazy and the forced call grammar. For a held schema,
every candidate arguments text the grammar admits passes the guard's validation unchanged, and the
parser's streamed pieces of it join to the call the guard then checks; for each keyword the walk
refuses, a candidate shows the grammar admitting what the validator (or the stream) would not take."""

from __future__ import annotations

import itertools
import json

import pytest

from hearth.sample.grammar import GrammarCompiler
from hearth.sampling_params import StructuredOutput
from hearth.tool_guard import check_calls, lazy_tool_grammar
from hearth.tool_guard.held import region_held, schema_held
from hearth.tool_parsers import OutputParser, ToolCallArgumentsDelta, ToolCallEvent, ToolCallStart, call_constraint
from tests.tool_guard.tiny_vocab import TinyTokenizer

TOK = TinyTokenizer()
COMPILER = GrammarCompiler(TOK, TOK.vocab_size)
VALUES = ['1', '1.0', '-0', '1e2', '"1"', '"x"', 'true', 'null', '[1]', '["x"]', '[]', '{}', '{"b": 1}',
          '{"b": "x"}', '{"b": 1, "b": 2}', '{"b": 1, "z": 2}']


def _obj(props: dict, **kw) -> dict:
    return {"type": "object", "properties": props, **kw}


CLOSED_B = _obj({"b": {"type": "integer"}}, required=["b"], additionalProperties=False)
HELD = {
    "typed": _obj({"a": {"type": "integer"}, "c": {"type": "string"}}, required=["c"]),
    "number_bounds": _obj({"a": {"type": "number", "minimum": 0, "maximum": 5, "description": "d"}}),
    "pattern_format": _obj({"a": {"type": "string", "pattern": "^[a-z]+$"}, "c": {"type": "string", "format": "date"}}),
    "enum_const": _obj({"a": {"enum": [1, "x", None]}, "c": {"const": "x"}}),
    "nullable_list": _obj({"a": {"type": ["integer", "null"]}}),
    "array_of_closed": _obj({"a": {"type": "array", "items": CLOSED_B}}),
    "nested_closed": _obj({"a": CLOSED_B}, required=["a"]),
    "any_of": _obj({"a": {"anyOf": [{"type": "integer"}, CLOSED_B]}}),
    "no_parameters": {"type": "object"},
}
UNHELD = {
    "pattern_properties": _obj({"a": {"type": "integer"}}, patternProperties={"^z": {}}),
    "prefix_items": _obj({"a": {"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "integer"}}}),
    "enum_coerced": _obj({"a": {"type": "integer", "enum": [1.0]}}),
    "open_nested": _obj({"a": {"type": "object"}, "c": {"type": "string"}}, required=["c"]),
    "untyped": _obj({"a": {"description": "anything"}, "c": {"type": "string"}}, required=["c"]),
    "array_any": _obj({"a": {"type": "array"}, "c": {"type": "string"}}, required=["c"]),
    "all_of": _obj({"a": {"allOf": [{"type": "integer"}]}}),
}


def _tool(schema: dict) -> dict:
    return {"type": "function", "function": {"name": "t", "parameters": schema}}


def _matcher(schema: dict, forced: bool):
    grammar = (call_constraint("hermes", [_tool(schema)], "required").lark() if forced
               else lazy_tool_grammar("hermes", [_tool(schema)]))
    return COMPILER.matcher(StructuredOutput(grammar=grammar))._m


def _admits(base, text: str) -> bool:
    m = base.deep_copy()
    if not all(m.consume_token(b) for b in text.encode()):
        return False
    mask = m.compute_bitmask()
    return bool(int.from_bytes(mask[4 * (TOK.eos_id // 32):4 * (TOK.eos_id // 32) + 4], "little") >> TOK.eos_id % 32 & 1)


def _output(arguments: str) -> str:
    return f'<tool_call>\n{{"name": "t", "arguments": {arguments}}}\n</tool_call>'


def _candidates() -> list[str]:
    out = ["{}"]
    for v in VALUES:
        out += [f'{{"a": {v}}}', f'{{"c": {v}}}', f'{{"a": {v}, "c": "x"}}', f'{{"c": "x", "a": {v}}}',
                f'{{"a": {v}, "z": 1}}', f'{{"a": {v}, "a": 1}}', f'{{"a": {{"k": 1, "k": 2}}, "c": {v}}}']
    out.append('{"a": [{"k": 1, "k": 2}], "c": "x"}')
    return out + [f'{{"a": [{v}, {w}]}}' for v, w in itertools.product(VALUES[:6], repeat=2)]


CANDIDATES = _candidates()


def _streamed(arguments: str, schema: dict) -> tuple[str, object]:
    """(the streamed pieces joined, the guard's check) for an output the grammar admitted."""
    parser = OutputParser("hermes", None)
    events = parser.feed(_output(arguments)) + parser.finish()
    assert isinstance(events[0], ToolCallStart)
    pieces = "".join(e.text for e in events if isinstance(e, ToolCallArgumentsDelta))
    (call,) = [e.call for e in events if isinstance(e, ToolCallEvent)]
    assert call.arguments.startswith(pieces)
    return call.arguments, check_calls([call], {"t": schema}, False)


@pytest.mark.parametrize("forced", [False, True], ids=["lazy", "forced"])
@pytest.mark.parametrize("name", list(HELD))
def test_a_held_schema_admits_only_calls_that_pass_unchanged(name, forced):
    schema = HELD[name]
    assert schema_held(schema)
    base = _matcher(schema, forced)
    admitted = [a for a in CANDIDATES if _admits(base, _output(a))]
    assert admitted, "no candidate fits: the check would be empty"
    for arguments in admitted:
        final, checked = _streamed(arguments, schema)
        assert checked.ok and not checked.coercions, (arguments, checked.problems)
        assert checked.calls[0].arguments == final


@pytest.mark.parametrize("name", list(UNHELD))
def test_what_the_walk_refuses(name):
    schema = UNHELD[name]
    assert not schema_held(schema)
    if name in ("all_of", "enum_coerced"):  # refused without a counterexample (llguidance drops 1.0 here)
        return
    base = _matcher(schema, False)
    bad = [a for a in CANDIDATES if _admits(base, _output(a)) and not _clean(*_streamed(a, schema))]
    assert bad, f"{name}: the grammar admits nothing the guard would reject or a client could read otherwise"


def _clean(arguments: str, checked) -> bool:
    """The guard passes the call unchanged, and every JSON parser reads the streamed arguments as
    the guard did: no repeated key (Python keeps the last value, other parsers the first or refuse)."""
    return checked.ok and not checked.coercions and json.dumps(json.loads(arguments), ensure_ascii=False) == arguments


def test_both_grammars_close_the_declared_parameters():
    """As the validator does (declared_only): an undeclared parameter passes neither grammar."""
    open_params = _obj({"a": {"type": "integer"}})
    assert schema_held(open_params)
    for forced in (False, True):
        assert _admits(_matcher(open_params, forced), _output('{"a": 1}'))
        assert not _admits(_matcher(open_params, forced), _output('{"z": 1}'))


@pytest.mark.parametrize("text,k,parallel,forced,held", [
    ('<tool_call>\n{"name": "t", "arguments": {"a": 1', 0, True, False, True),
    ('Sure.<tool_call>\n{"name": "t", "arguments": {}}\n</tool_call><tool_call>\n{"name": "t", "arguments": {"a"', 1,
     True, False, True),
    ('```json\n{"name": "t", "arguments": {"a": 1', 0, True, False, False),  # free text may follow it
    ('```json\n{"name": "t", "arguments": {"a": 1', 0, False, False, True),
    ('{"name": "t", "arguments": {"a": 1', 0, True, True, True),  # a forced call: the only one
    ('<think>maybe <tool_call></think><tool_call>\n{"name": "t", "arguments": {"a": 1', 0, True, False, False),
])
def test_region_held(text, k, parallel, forced, held):
    assert region_held(text, "hermes", k, parallel, forced) is held


def test_a_repeated_key_in_an_open_object_streams_as_written():
    """Why every object must be closed: the grammar admits a repeated key there, and the streamed
    call carries it as the model wrote it (never cut short: nothing is dropped), which a parser that
    keeps the first value reads otherwise than the guard, which keeps the last."""
    arguments, checked = _streamed('{"a": {"k": 1, "k": 2}, "c": "x"}', UNHELD["open_nested"])
    assert arguments == '{"a": {"k": 1, "k": 2}, "c": "x"}' and checked.ok
    assert not _clean(arguments, checked)
