"""A JSON schema's grammar as llguidance Lark, so a number written with an exponent keeps it.

llguidance takes a number's bounds only as minimum/maximum, and a bounded number has no exponent
(hearth.sample.schema_bounds bounds every number a schema leaves open, or a small model writes digits
without end): the grammar cut `"permeability": 12.57e10` to `12.57` at the `e`, a value off by 10^10
that the arguments' validation then passed (BFCL simple_python_40, both Qwen2.5-Coder models in
`guard` mode; `bare` kept it), and a structured output's `6.02e23` likewise. Here a number the schema
leaves plain (a type and words about it, nothing else) is a Lark terminal instead, bounded in digits
as schema_bounds bounds them, exponent included, wherever it is reached through closed objects, arrays
and anyOf; every other value stays llguidance's `%json` of its bounded schema, and a schema with no such
number is one `%json` as before.

An object is spelled out only where llguidance reads it alike: `type: object`, its properties in
their order (llguidance's order too), each optional one omissible, no other member
(`additionalProperties: false`, as schema_closed and the tool grammars' declared_only make it)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import NamedTuple

NUMBER = "JSON_NUMBER"
GAP = "JSON_GAP"
CALL_LAYOUT = r"[ \t]{0,4}(\n{1,2}[ \t]{0,20})?"
"""The whitespace a tool call's JSON takes between two tokens: a few spaces, or a line break or two and an
indent of up to 20 (llama.cpp's schema grammars' `space` rule), as pretty-printed JSON writes a nested
object's members: a newline and 4 spaces were refused under `[ \t\n]{0,4}` (BFCL simple_python_260's `area`,
both Qwen2.5-Coder models in guard mode). Bounded, so a small model cannot pad forever."""
TERMINALS = {
    # at most 15 integer digits and 10 of fraction, as schema_bounds' NUMBER_LIMIT and NUMBER_STEP allow,
    # and an exponent of two: a double's range, never inf
    NUMBER: r"/-?(0|[1-9][0-9]{0,14})(\.[0-9]{1,10})?([eE][+-]?[0-9]{1,2})?/",
    GAP: f"/{CALL_LAYOUT}/",
}

_WORDS = frozenset({"title", "description", "default", "examples"})
"""Keywords that constrain nothing: a schema with only these and its type is plain."""
_OBJECT = _WORDS | {"type", "properties", "required", "additionalProperties"}


def value_rules(rule: str, schema, as_json: Callable[[dict], dict], gap: bool) -> list[str]:
    """Lark rules defining `rule` as one JSON value valid against `schema`: as_json(subschema) is the
    schema a `%json` embeds (bounded, with its layout options); gap: a tool call's layout between
    tokens (GAP), else compact JSON. The terminals they name are added by with_terminals, once."""
    if not _has_plain_number(schema) or _refers(schema):
        return [f"{rule}: %json {json.dumps(as_json(schema))}"]
    rules: list[str] = []
    _named(rule, schema, _Spell(as_json, f" {GAP} " if gap else " "), rules)
    return rules


def with_terminals(lines: list[str]) -> list[str]:
    """A grammar's `lines` with the terminal definitions its value_rules name, each once."""
    return lines + [f"{name}: {rx}" for name, rx in TERMINALS.items() if any(name in ln for ln in lines)]


class _Spell(NamedTuple):
    as_json: Callable[[dict], dict]
    sep: str
    """Between two tokens: " GAP " (a tool call's layout) or " " (compact JSON)."""


def _named(rule: str, schema, spell: _Spell, rules: list[str]) -> str:
    """Defines `rule` as `schema`'s expression (each sub-value gets a rule of its own) and returns it."""
    if _plain_number(schema):
        body = NUMBER
    elif _plain_object(schema) and _has_plain_number(schema):
        body = _object(rule, schema, spell, rules)
    elif _plain_array(schema) and _has_plain_number(schema):
        s, item = spell.sep, _named(f"{rule}_item", schema["items"], spell, rules)
        body = f'"["{s}({item}({s}","{s}{item})*)?{s}"]"'
    elif _plain_any_of(schema) and _has_plain_number(schema):
        body = " | ".join(_named(f"{rule}_{i}", s, spell, rules) for i, s in enumerate(schema["anyOf"]))
    else:
        body = f"%json {json.dumps(spell.as_json(schema))}"
    rules.append(f"{rule}: {body}")
    return rule


def _object(rule: str, schema: dict, spell: _Spell, rules: list[str]) -> str:
    """`{`, the members in order, each optional one omissible, commas between those present, `}`."""
    s, required = spell.sep, set(schema.get("required", []))
    members = [(f'{json.dumps(json.dumps(key, ensure_ascii=False))}{s}":"{s}{_named(f"{rule}_{i}", sub, spell, rules)}',
                key in required) for i, (key, sub) in enumerate(schema["properties"].items())]
    # the first member present: any optional one before the first required, or that one
    heads = []
    for i, (member, needed) in enumerate(members):
        rest = [f'{s}","{s}{m}' if req else f'({s}","{s}{m})?' for m, req in members[i + 1:]]
        heads.append(f"({member}{''.join(rest)})")
        if needed:
            break
    body = " | ".join(heads)
    return f'"{{"{s}({body}){"" if required else "?"}{s}"}}"'


def _plain_number(schema) -> bool:
    return isinstance(schema, dict) and schema.get("type") == "number" and set(schema) <= _WORDS | {"type"}


def _plain_object(schema) -> bool:
    if not (isinstance(schema, dict) and schema.get("type") == "object" and set(schema) <= _OBJECT):
        return False
    props, required = schema.get("properties"), schema.get("required", [])
    return (isinstance(props, dict) and bool(props) and all(isinstance(s, dict) for s in props.values())
            and schema.get("additionalProperties") is False
            and isinstance(required, list) and all(isinstance(r, str) and r in props for r in required))


def _plain_array(schema) -> bool:
    return (isinstance(schema, dict) and schema.get("type") == "array" and set(schema) <= _WORDS | {"type", "items"}
            and isinstance(schema.get("items"), dict))


def _plain_any_of(schema) -> bool:
    return isinstance(schema, dict) and isinstance(schema.get("anyOf"), list) and set(schema) <= _WORDS | {"anyOf"}


def _has_plain_number(schema) -> bool:
    """Whether a number that keeps its exponent is reached from here through closed objects, arrays and anyOf."""
    if _plain_number(schema):
        return True
    if _plain_object(schema):
        return any(_has_plain_number(s) for s in schema["properties"].values())
    if _plain_array(schema):
        return _has_plain_number(schema["items"])
    return _plain_any_of(schema) and any(_has_plain_number(s) for s in schema["anyOf"])


def _refers(schema) -> bool:
    """A `$ref` or `$defs` anywhere: a sub-value's `%json` would lose the definitions it names."""
    if isinstance(schema, dict):
        return any(k in ("$ref", "$defs", "definitions") or _refers(v) for k, v in schema.items())
    return isinstance(schema, list) and any(_refers(v) for v in schema)
