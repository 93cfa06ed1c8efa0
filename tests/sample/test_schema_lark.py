"""A plain number keeps its exponent in a structured output (hearth.sample.schema_lark), and the schema's
grammar spelled out in Lark takes exactly what llguidance's own takes wherever no exponent is written."""

from __future__ import annotations

import itertools
import json
import random

import llguidance
import pytest

from hearth.sample import grammar
from hearth.sample.schema_bounds import with_bounded_numbers
from hearth.sample.schema_closed import closed_objects
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
SCHEMAS = [
    POINT,
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "number"}, "c": {"type": "boolean"}}},
    {"type": "object", "properties": {"points": {"type": "array", "items": POINT}, "scale": {"type": "number"}},
     "required": ["points", "scale"]},
    {"type": "object", "properties": {"v": {"anyOf": [{"type": "number"}, {"type": "string"}]},
                                      "w": {"type": "number", "minimum": 0, "maximum": 10}}, "required": ["v", "w"]},
]


def _variants(value, rng: random.Random):
    """Texts near a valid instance: as is, members dropped, reordered, added, values of another type."""
    yield json.dumps(value, separators=(",", ":"))
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


def _instance(schema, rng: random.Random):
    if "anyOf" in schema:
        return _instance(rng.choice(schema["anyOf"]), rng)
    kind = schema["type"]
    if kind == "object":
        return {k: _instance(s, rng) for k, s in schema["properties"].items()
                if k in schema.get("required", []) or rng.random() < 0.6}
    if kind == "array":
        return [_instance(schema["items"], rng) for _ in range(rng.randrange(3))]
    return {"number": lambda: rng.choice([0, -2, 1.5, 3.25, 7]), "integer": lambda: rng.randrange(-5, 5),
            "string": lambda: "ab", "boolean": lambda: True}[kind]()


@pytest.mark.parametrize("schema", SCHEMAS, ids=["point", "optional-only", "nested-array", "any-of"])
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
    {"type": "object", "properties": {"n": {"type": "number", "minimum": 0}}},  # a bound given: llguidance's range
    {"type": "object", "properties": {"n": {"type": "number"}}, "additionalProperties": True},  # open: not spelled
    {"$defs": {"n": {"type": "number"}}, "type": "object", "properties": {"n": {"$ref": "#/$defs/n"}}},
    {"type": ["number", "null"]},
])
def test_what_is_not_plain_stays_one_json_grammar(schema):
    assert grammar._with_exponents(closed_objects(schema)) is None
