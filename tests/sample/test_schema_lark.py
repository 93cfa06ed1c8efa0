"""A plain number keeps its exponent in a structured output (hearth.sample.schema_lark), and the schema's
grammar spelled out in Lark takes exactly what llguidance's own takes wherever no exponent is written."""

from __future__ import annotations

import itertools
import json
import random

import llguidance
import pytest

from hearth.sample import grammar
from hearth.sample.schema_bounds import ANY_OBJECT, with_bounded_numbers
from hearth.sample.schema_closed import closed_objects
from hearth.sample.schema_lark import SIGNED
from hearth.sampling_params import StructuredOutput
from tests.tool_guard.tiny_vocab import TinyTokenizer

TOK = TinyTokenizer()
LL_TOKENIZER = grammar.GrammarCompiler(TOK, TOK.vocab_size).ll_tokenizer


def takes(compiled: str, text: str) -> bool:
    m = llguidance.LLMatcher(LL_TOKENIZER, compiled, log_level=0)
    return all(m.consume_token(t) for t in TOK.encode(text)) and m.is_accepting()


def spelled(schema: dict) -> str:
    compiled = grammar._with_exponents(closed_objects(schema))
    assert compiled is not None, "nothing spelled out: the test would compare llguidance with itself"
    return compiled


def llguidances(schema: dict) -> str:
    return with_bounded_numbers(closed_objects(schema), grammar._schema_grammar)


POINT = {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number", "title": "y"},
                                          "label": {"type": "string"}}, "required": ["y"]}
SCHEMAS = {
    "point": POINT,
    "optional-only": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "number"},
                                                       "c": {"type": "boolean"}}},
    "nested-array": {"type": "object", "properties": {"points": {"type": "array", "items": POINT},
                                                      "scale": {"type": "number"}}, "required": ["points", "scale"]},
    "any-of": {"type": "object", "properties": {"v": {"anyOf": [{"type": "number"}, {"type": "string"}]},
                                                "w": {"type": "number", "minimum": 0, "maximum": 10}},
               "required": ["v", "w"]},
    # under $refs, once or recursively
    "refs": {"$defs": {"P": POINT}, "type": "object", "properties": {
        "a": {"$ref": "#/$defs/P"}, "b": {"type": "array", "items": {"$ref": "#/$defs/P", "title": "b"}}},
        "required": ["a"]},
    "ref-in-json": {"$defs": {"P": POINT}, "type": "object", "properties": {
        "ps": {"type": "array", "items": {"$ref": "#/$defs/P"}, "minItems": 1}, "n": {"type": "number"}}},
    "recursive-ref": {"definitions": {"T": {"type": "object", "properties": {"v": {"type": "number"}, "kids": {
        "type": "array", "items": {"$ref": "#/definitions/T"}}}, "required": ["v"]}}, "$ref": "#/definitions/T"},
    # open objects: others after the properties, keyed by any other string; their values any JSON or a schema's
    "open": {**POINT, "additionalProperties": True},
    "open-schema": {"type": "object", "properties": {"x": {"type": "number"}},
                    "additionalProperties": {"type": "integer"}},
    "untyped": {"type": "object", "properties": {"x": {}, "tags": {"type": "array"}}, "required": ["x"]},
    "json-object": ANY_OBJECT,  # response_format json_object
    "signed": {"type": "object", "properties": {k: {"type": "number", bound: 0} for k, bound in zip("abcd", SIGNED)}},
    "type-lists": {"type": "object", "properties": {"a": {"type": ["number", "null"]},
                                                    "b": {"type": ["integer", "number", "string"]}}},
}


def _variants(value, rng: random.Random):
    """Texts near a valid instance: as is, members dropped, reordered, added, values of another type."""
    yield json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if isinstance(value, dict) and value:
        keys = list(value)
        for k in keys:
            yield json.dumps({j: value[j] for j in keys if j != k}, separators=(",", ":"))
        yield json.dumps(dict(reversed(list(value.items()))), separators=(",", ":"))
        yield json.dumps({**value, "extra": 1}, separators=(",", ":"))
        k = rng.choice(keys)
        for other in ("s", 1, 2.5, True, None, [], {}):
            yield json.dumps({**value, k: other}, separators=(",", ":"))
    yield json.dumps(value)  # with spaces: compact JSON only


ANY_VALUES = [None, False, 0, -2.5, "ab", 'q"\\\n\t/', "é", "\x01\x7f", [], [1, "x"], {}, {"k": [None, {"q": 1.5}]}]
"""Values of an untyped schema: escapes (a control character's \\u), nested ones."""


def _instance(schema, rng: random.Random, root=None, depth: int = 0):
    root = root or schema
    if schema is True or not set(schema) - {"title", "description"}:
        return rng.choice(ANY_VALUES)
    if "$ref" in schema:
        where, name = schema["$ref"][2:].split("/")
        return _instance(root[where][name], rng, root, depth)
    if "anyOf" in schema:
        return _instance(rng.choice(schema["anyOf"]), rng, root, depth)
    kind = schema["type"] if isinstance(schema["type"], str) else rng.choice(schema["type"])
    if kind == "object":
        value = {k: _instance(s, rng, root, depth + 1) for k, s in schema.get("properties", {}).items()
                 if k in schema.get("required", []) or rng.random() < 0.6}
        if schema.get("additionalProperties", True) is not False and rng.random() < 0.5:
            value["zz"] = _instance(schema.get("additionalProperties", True), rng, root, depth + 1)
        return value
    if kind == "array":
        items = schema.get("items", True)
        return [_instance(items, rng, root, depth + 1) for _ in range(rng.randrange(max(1, 3 - depth)))]
    return {"number": lambda: rng.choice([0, 0.0, -2, -0.5, 1.5, 3.25, 7]), "integer": lambda: rng.randrange(-5, 5),
            "string": lambda: "ab", "boolean": lambda: True, "null": lambda: None}[kind]()


@pytest.mark.parametrize("schema", SCHEMAS.values(), ids=SCHEMAS)
def test_spelled_out_takes_what_llguidance_takes_without_an_exponent(schema):
    rng = random.Random(7)
    ours, theirs = spelled(schema), llguidances(schema)
    texts = set(itertools.chain.from_iterable(_variants(_instance(schema, rng), rng) for _ in range(12)))
    differ = [t for t in sorted(texts) if takes(ours, t) != takes(theirs, t)]
    assert not differ, differ[:3]
    assert any(takes(theirs, t) for t in texts) and not all(takes(theirs, t) for t in texts)  # both kinds tried


@pytest.mark.parametrize("text, ok", [
    ('{"y":6.02e23}', True), ('{"x":-1.5E-07,"y":1e+5,"label":"p"}', True),
    ('{"y":1e999}', False), ('{"y":1e}', False), ('{"y":1' + "0" * 15 + "}", False), ('{"y":0.12345678901}', False),
])
def test_a_plain_number_keeps_its_exponent(text, ok):
    """The bounded number had none: `6.02e23` was cut to `6.02` at the `e`."""
    assert takes(spelled(POINT), text) == ok
    assert not takes(llguidances(POINT), '{"y":6.02e23}')  # what llguidance's bounded number does


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"n": {"type": "number", "minimum": 1}}},  # a bound given: llguidance's range
    {"type": "object", "properties": {"n": {"type": "number", "minimum": 0, "maximum": 1}}},
    {"$defs": {"n": {"type": "number"}}, "type": "object", "properties": {"n": {"$ref": "#/$defs/n", "minimum": 0}}},
    {"type": "object", "properties": {"n": {"$ref": "#/$defs/m"}}},  # names nothing
    {"type": "object", "properties": {"n": {"$ref": "https://example.com/n.json"}}},  # not in the document
    {"$id": "https://example.com/s", "type": "object", "properties": {"n": {"type": "number"}}},  # moves refs
    {"type": "object", "properties": {"n": {"type": "number"}}, "patternProperties": {"^x": {}}},
    {"type": ["number", "null"], "minimum": 1},
])
def test_what_is_not_plain_stays_one_json_grammar(schema):
    assert grammar._with_exponents(closed_objects(schema)) is None


NUMBER_TEXTS = [("6.626e-27", True), ("1E+5", True), ("-0.5e3", True), ("12.57e10", True), ("-2.5", True),
                ("0", True), ("1e", False), ("01", False), (".5", False), ("1.", False), ("1e999", False),
                ("+1", False), ("1" + "0" * 15, False), ("0." + "3" * 11, False)]
"""A JSON number in the schema's grammar: with an exponent (of two digits, never inf) or without, and
texts that are no JSON number, or past the digit bounds (hearth.sample.schema_bounds)."""
_N = {"type": "number"}
_POINT = {"type": "object", "properties": {"x": _N}, "required": ["x"]}
REACHED = {  # a schema, and a text of it with `%s` where a number goes
    "ref": ({"$defs": {"n": _N}, "type": "object", "properties": {"x": {"$ref": "#/$defs/n", "title": "x"}},
             "required": ["x"]}, '{"x":%s}'),
    "ref-object": ({"$defs": {"P": _POINT}, "type": "object", "properties": {"p": {"$ref": "#/$defs/P"}},
                    "required": ["p"]}, '{"p":{"x":%s}}'),
    "ref-root-recursive": ({"$defs": {"T": {"type": "object", "properties": {
        "v": _N, "kids": {"type": "array", "items": {"$ref": "#/$defs/T"}}}, "required": ["v"]}},
        "$ref": "#/$defs/T"}, '{"v":1,"kids":[{"v":%s,"kids":[]}]}'),
    "definitions": ({"definitions": {"n": _N}, "type": "array", "items": {"$ref": "#/definitions/n"}}, "[1,%s]"),
    "ref-in-json": ({"$defs": {"P": _POINT}, "type": "object", "properties": {  # the array's %json needs P beside it
        "ps": {"type": "array", "items": {"$ref": "#/$defs/P"}, "minItems": 1}, "n": _N}, "required": ["ps", "n"]},
        '{"ps":[{"x":1}],"n":%s}'),
    "pointer": ({"type": "object", "properties": {"m": _N, "n": {"$ref": "#/properties/m"}}}, '{"n":%s}'),
    "defs-below-root": ({"type": "object", "properties": {"args": {  # as a forced call's arguments stand
        "$defs": {"P": _POINT}, "type": "object", "properties": {"p": {"$ref": "#/properties/args/$defs/P"}}}}},
        '{"args":{"p":{"x":%s}}}'),
    "open-property": ({**_POINT, "additionalProperties": True}, '{"x":%s}'),
    "open-extra": ({**_POINT, "additionalProperties": True}, '{"x":1,"y":%s}'),
    "open-schema": ({"type": "object", "additionalProperties": _N}, '{"y":%s}'),
    "any-object": ({"type": "object"}, '{"y":[{"z":%s}]}'),
    "type-list": ({"type": "object", "properties": {"x": {"type": ["number", "null"], "title": "x"}}}, '{"x":%s}'),
    "any-value": ({"type": "object", "properties": {"x": {}}, "required": ["x"]}, '{"x":%s}'),
}


@pytest.mark.parametrize("text, ok", NUMBER_TEXTS)
@pytest.mark.parametrize("where", REACHED)
def test_a_number_keeps_its_exponent_wherever_the_schema_leaves_it_plain(where, text, ok):
    """Under a `$ref`, in an open object and in any JSON value the number was llguidance's bounded one (no
    exponent: `6.626e-27` cut at the `e`), or, in an open object's untyped values, unbounded in digits."""
    schema, around = REACHED[where]
    assert takes(grammar.compile_grammar(StructuredOutput(json_schema=schema)), around % text) == ok


@pytest.mark.parametrize("text, ok", NUMBER_TEXTS)
@pytest.mark.parametrize("around", ['{"a":%s}', '{"a":{"b":[true,%s]}}'])
def test_a_json_objects_numbers_keep_their_exponent(around, text, ok):
    """response_format json_object (any JSON object) bounded its numbers with llguidance's, without an exponent."""
    assert takes(grammar.compile_grammar(StructuredOutput(json_object=True)), around % text) == ok


@pytest.mark.parametrize("text, ok", [("5", True), ("0.25", True), ("-1", False), ("11", False),
                                      ("5e0", False), ("1e", False)])
def test_a_bounded_number_keeps_its_bounds_and_takes_no_exponent(text, ok):
    """llguidance enforces a bound only on its own number, which has no exponent: the bound is kept."""
    schema = {"type": "object", "properties": {"x": {"type": "number", "minimum": 0, "maximum": 10}}, "required": ["x"]}
    assert takes(grammar.compile_grammar(StructuredOutput(json_schema=schema)), '{"x":%s}' % text) == ok


_UNTYPED = {"type": "object", "properties": {"x": {}}, "required": ["x"]}
_OPEN = {**POINT, "additionalProperties": True}


@pytest.mark.parametrize("schema, text", [
    *((_UNTYPED, t) for t in [r'{"x":"\u0061"}', r'{"x":"\u001F\u007f"}', r'{"x":"\u0020"}', r'{"x":"\/"}',
                              r'{"x":"\U0001"}', r'{"x":{"\u0001":[]}}', r'{"x":{"\u0041":1}}', '{"x":"\x7f"}']),
    *((_OPEN, t) for t in ['{"y":1,"x":2}', '{"x":1,"y":2,"zz":3,"zz":4}', '{"y":1,"zz":2,"y":3}',
                           '{"y":1,"zz":2,"label":"a"}', '{"y":1,"label":"a","labels":1,"x ":2,"":3}', '{"zz":1}']),
])
def test_spelled_out_takes_what_llguidance_takes_where_instances_do_not_reach(schema, text):
    """Strings with `\\u` escapes (json.dumps writes only a control character's) and an open object's other
    members: keyed by any string but a property's name, after the properties, a key again as llguidance allows."""
    assert takes(spelled(schema), text) == takes(llguidances(schema), text)


@pytest.mark.parametrize("bound, text, ok", [
    ("minimum", "6.626e-27", True), ("minimum", "0.0", True), ("minimum", "-0.5e3", False), ("minimum", "-0", False),
    ("exclusiveMinimum", "1E+5", True), ("exclusiveMinimum", "0e5", False), ("exclusiveMinimum", "0.0", False),
    ("maximum", "-0.5e3", True), ("maximum", "0", True), ("maximum", "1e-3", False),
    ("exclusiveMaximum", "-2.5E-7", True), ("exclusiveMaximum", "-0.0e1", False), ("exclusiveMaximum", "0", False),
    ("minimum", "1e999", False), ("maximum", "-1e", False),
])
def test_a_number_bounded_at_zero_keeps_its_bound_and_its_exponent(bound, text, ok):
    """`minimum: 0` and its kin say only the number's sign: a terminal enforces the bound, exponent included."""
    schema = {"type": "object", "properties": {"x": {"type": "number", bound: 0}}, "required": ["x"]}
    assert takes(grammar.compile_grammar(StructuredOutput(json_schema=schema)), '{"x":%s}' % text) == ok


@pytest.mark.parametrize("name", ["refs", "open", "untyped", "signed"])
def test_a_calls_spelled_arguments_take_what_llguidance_takes_without_an_exponent(name):
    """A tool call's arguments are spelled with its layout between tokens (JSON_GAP, call_any) and
    llguidance's lenient options: the same texts as its one `%json`, compact, spaced and indented."""
    from hearth.sample.schema_lark import with_terminals
    from hearth.tool_parsers.schema import call_json, json_rules

    def lark(lines: list[str]) -> str:
        return llguidance.LLMatcher.grammar_from_lark("\n".join(with_terminals(lines)))

    schema = SCHEMAS[name]
    ours, theirs = lark(json_rules("start", schema)), lark([f"start: %json {json.dumps(call_json(schema))}"])
    assert "JSON_GAP" in ours  # spelled, not llguidance's own
    rng = random.Random(3)
    texts = set()
    for t in itertools.chain.from_iterable(_variants(_instance(schema, rng), rng) for _ in range(4)):
        texts |= {t, json.dumps(json.loads(t), ensure_ascii=False), json.dumps(json.loads(t), indent=4)}
    differ = [t for t in sorted(texts) if takes(ours, t) != takes(theirs, t)]
    assert not differ, differ[:3]
