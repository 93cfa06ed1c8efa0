"""A JSON schema's grammar as llguidance Lark, so a number written with an exponent keeps it.

llguidance takes a number's bounds only as minimum/maximum, and a bounded number has no exponent
(hearth.sample.schema_bounds bounds every number a schema leaves open, or a small model writes digits
without end): the grammar cut `"permeability": 12.57e10` to `12.57` at the `e`, a value off by 10^10
that the arguments' validation then passed (BFCL simple_python_40, both Qwen2.5-Coder models in
`guard` mode; `bare` kept it), and a structured output's `6.02e23` likewise. Here a number the schema
leaves plain (a type and words about it, nothing else) is a Lark terminal instead, bounded in digits
as schema_bounds bounds them, exponent included, and so is every number of a value the schema leaves
untyped (`{}`, an open object's other members: any JSON, whose numbers llguidance left unbounded, 1e999
included), wherever it is reached through objects, arrays, anyOf and local `$ref`s (a sub-value's `%json`
gets what its refs reach beside it: hearth.sample.schema_refs); every other value stays llguidance's
`%json` of its bounded schema, and a schema with no such number is one `%json` as before. A number
bounded at 0 on one side (`minimum: 0`, ...) is a terminal of its sign (SIGNED), exponent included; one
with other bounds keeps llguidance's, which enforces them and takes no exponent: a range over exponents
is no regex this file writes.

An object is spelled out only where llguidance reads it alike: `type: object`, its properties in
their order (llguidance's order too), each optional one omissible, then, where it is open
(`additionalProperties` true, a schema or absent), other members, keyed by any string but the
properties' names (llguidance's key there takes any `\\u` escape, this one only a control character's)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from hearth.sample.schema_refs import MISSING, pointer, refs, resolve, rewritten

NUMBER = "JSON_NUMBER"
STRING = "JSON_STRING"
GAP = "JSON_GAP"
CALL_LAYOUT = r"[ \t]{0,4}(\n{1,2}[ \t]{0,20})?"
"""The whitespace a tool call's JSON takes between two tokens: a few spaces, or a line break or two and an
indent of up to 20 (llama.cpp's schema grammars' `space` rule), as pretty-printed JSON writes a nested
object's members: a newline and 4 spaces were refused under `[ \t\n]{0,4}` (BFCL simple_python_260's `area`,
both Qwen2.5-Coder models in guard mode). Bounded, so a small model cannot pad forever."""
_DIGITS = r"(0|[1-9][0-9]{0,14})(\.[0-9]{1,10})?([eE][+-]?[0-9]{1,2})?"
_ZERO = r"0(\.0+)?([eE][+-]?[0-9]+)?"
SIGNED = {"minimum": "JSON_NONNEGATIVE", "exclusiveMinimum": "JSON_POSITIVE", "maximum": "JSON_NONPOSITIVE",
          "exclusiveMaximum": "JSON_NEGATIVE"}
"""A number whose one bound is 0 (`minimum: 0`, common in tools' parameters) is a sign: exactly a terminal."""
TERMINALS = {
    # at most 15 integer digits and 10 of fraction, as schema_bounds' NUMBER_LIMIT and NUMBER_STEP allow,
    # and an exponent of two: a double's range, never inf
    NUMBER: f"/-?{_DIGITS}/",
    # a zero as llguidance's bounded numbers write it: `0.0` >= 0, `0` alone <= 0, never `-0`
    "JSON_NONNEGATIVE": f"/{_DIGITS}/",
    "JSON_POSITIVE": f"/{_DIGITS}/ & ~/{_ZERO}/",
    "JSON_NONPOSITIVE": '"0" | JSON_NEGATIVE',
    "JSON_NEGATIVE": f"/-{_DIGITS}/ & ~/-{_ZERO}/",
    # llguidance's string: no raw control character or DEL, escapes of one letter, \u only for those (no \/)
    STRING: r'/"([^"\\\x00-\x1f\x7f]|\\(["\\bfnrt]|u00[01][0-9a-fA-F]|u007[fF]))*"/',
    GAP: f"/{CALL_LAYOUT}/",
}
ANY = {" ": "json_any", f" {GAP} ": "call_any"}
"""The rule of any JSON value (its numbers JSON_NUMBER) for each separator: compact JSON, a tool call's layout."""

_WORDS = frozenset({"title", "description", "default", "examples", "$comment", "$schema", "$defs", "definitions"})
"""Keywords that constrain nothing (definitions only where a `$ref` names them): a schema with only these
and its type is plain."""
_OBJECT = _WORDS | {"type", "properties", "required", "additionalProperties"}
_UNFOLLOWED = frozenset({"$id", "$anchor", "$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor"})
"""Keywords that move what a `$ref` names: a schema with any of them stays one `%json`."""


def value_rules(rule: str, schema, as_json: Callable[[dict], dict], gap: bool) -> list[str]:
    """Lark rules defining `rule` as one JSON value valid against `schema`: as_json(subschema) is the
    schema a `%json` embeds (bounded, with its layout options); gap: a tool call's layout between
    tokens (GAP), else compact JSON. The terminals and ANY rules they name are added by with_terminals, once."""
    defs = _definitions(schema)
    spell = _Spell(as_json, f" {GAP} " if gap else " ", rule, defs or {})
    if defs is None or not spell.has_number(schema):
        return [f"{rule}: %json {json.dumps(as_json(schema))}"]
    name = spell.named(rule, schema)
    return spell.rules + ([f"{rule}: {name}"] if name != rule else [])


def with_terminals(lines: list[str]) -> list[str]:
    """A grammar's `lines` with the ANY rules and terminal definitions its value_rules name, each once."""
    lines = lines + [r for sep, name in ANY.items() if _names(name, lines) for r in _any_rules(name, sep)]
    for name, rx in TERMINALS.items():  # in order: a terminal's definition may name one further on
        if _names(name, lines):
            lines = [*lines, f"{name}: {rx}"]
    return lines


def _names(name: str, lines: list[str]) -> bool:
    return any(re.search(rf"\b{name}\b", ln) for ln in lines)


def _any_rules(name: str, s: str) -> list[str]:
    """Any JSON value as llguidance's `{}` takes it (duplicate keys included), its numbers JSON_NUMBER."""
    member = f'{STRING}{s}":"{s}{name}'
    return [f'{name}: "null" | "true" | "false" | {NUMBER} | {STRING} | {name}_array | {name}_object',
            f'{name}_array: "["{s}({name}({s}","{s}{name})*)?{s}"]"',
            f'{name}_object: "{{"{s}({member}({s}","{s}{member})*)?{s}"}}"']


@dataclass
class _Spell:
    as_json: Callable[[dict], dict]
    sep: str
    """Between two tokens: " GAP " (a tool call's layout) or " " (compact JSON)."""
    top: str
    defs: dict[str, object]
    """What each `$ref` in the schema names (`#/$defs/point`: the definition)."""
    rules: list[str] = field(default_factory=list)
    _ref_rules: dict[str, str] = field(default_factory=dict)

    def named(self, rule: str, schema) -> str:
        """Defines `rule` as `schema`'s expression (each sub-value gets a rule of its own) and returns it;
        a `$ref` returns its definition's rule instead, an untyped value the ANY rule."""
        schema = _types_apart(schema)
        if _ref(schema, self.defs):
            return self._definition(schema["$ref"])
        if _any(schema):
            return ANY[self.sep]
        if _plain_number(schema):
            body = NUMBER
        elif _signed(schema):
            body = _signed(schema)
        elif _plain_object(schema) and self.has_number(schema):
            body = self._object(rule, schema)
        elif _plain_array(schema) and self.has_number(schema):
            s, item = self.sep, self.named(f"{rule}_item", schema.get("items", True))
            body = f'"["{s}({item}({s}","{s}{item})*)?{s}"]"'
        elif _plain_any_of(schema) and self.has_number(schema):
            body = " | ".join(self.named(f"{rule}_{i}", s) for i, s in enumerate(schema["anyOf"]))
        else:
            body = f"%json {json.dumps(self.as_json(self._with_defs(schema)))}"
        self.rules.append(f"{rule}: {body}")
        return rule

    def has_number(self, schema, seen: frozenset[str] = frozenset()) -> bool:
        """Whether a number that keeps its exponent is reached from here through objects, arrays, anyOf
        and `$ref`s (each definition once: a recursive one ends)."""
        schema = _types_apart(schema)
        if _ref(schema, self.defs):
            ref = schema["$ref"]
            return ref not in seen and self.has_number(self.defs[ref], seen | {ref})
        if _plain_number(schema) or _signed(schema) or _any(schema):
            return True
        if _plain_object(schema):
            extra = schema.get("additionalProperties", True)
            return any(self.has_number(s, seen) for s in [*schema.get("properties", {}).values(), extra]
                       if s is not False)
        if _plain_array(schema):
            return self.has_number(schema.get("items", True), seen)
        return _plain_any_of(schema) and any(self.has_number(s, seen) for s in schema["anyOf"])

    def _definition(self, ref: str) -> str:
        """The rule of a definition, defined on its first use (named before its body: it may refer to itself)."""
        if ref not in self._ref_rules:
            self._ref_rules[ref] = rule = f"{self.top}_def_{len(self._ref_rules)}"
            self.named(rule, self.defs[ref])
        return self._ref_rules[ref]

    def _object(self, rule: str, schema: dict) -> str:
        """`{`, the members in order, each optional one omissible, then (open) any others, commas between, `}`."""
        s, required, props = self.sep, set(schema.get("required", [])), schema.get("properties", {})
        # (member, how often): 1 required, "?" optional, "*" the open object's others
        members = [(f'{json.dumps(json.dumps(key, ensure_ascii=False))}{s}":"{s}{self.named(f"{rule}_{i}", sub)}',
                    1 if key in required else "?") for i, (key, sub) in enumerate(props.items())]
        extra = schema.get("additionalProperties", True)
        if extra is not False:
            members.append((f'{self._key(rule, props)}{s}":"{s}{self.named(f"{rule}_extra", extra)}', "*"))
        # the first member present: any optional one before the first required, or that one
        heads = []
        for i, (member, often) in enumerate(members):
            rest = [f'{s}","{s}{m}' if n == 1 else f'({s}","{s}{m}){n}' for m, n in members[i + 1:]]
            head = f'{member}({s}","{s}{member})*' if often == "*" else member
            heads.append(f"({head}{''.join(rest)})")
            if often == 1:
                break
        body = " | ".join(heads)
        return f'"{{"{s}({body}){"" if required else "?"}{s}"}}"'

    def _key(self, rule: str, props: dict) -> str:
        """The key of an open object's other members: a string, none of its properties' (a terminal of its own)."""
        if not props:
            return STRING
        name = f"{rule.upper()}_KEY"
        names = "|".join(_escaped(json.dumps(k, ensure_ascii=False)) for k in props)
        self.rules.append(f"{name}: {TERMINALS[STRING]} & ~/{names}/")
        return name

    def _with_defs(self, schema):
        """A `%json` sub-value with what its `$ref`s reach, in `$defs` of its own (its refs renamed to them):
        its own document has nothing else."""
        reached, todo = [], refs(schema)
        while todo:
            ref = todo.pop()
            if ref not in reached:
                reached.append(ref)
                todo += refs(self.defs[ref])
        if not reached or not isinstance(schema, dict):
            return schema
        names = {ref: f"hearth_ref_{i}" for i, ref in enumerate(reached)}
        moved = {names[ref]: rewritten(self.defs[ref], lambda r: "#" + pointer("$defs", names[r])) for ref in reached}
        out = rewritten(schema, lambda r: "#" + pointer("$defs", names[r]))
        own = out.get("$defs") if isinstance(out.get("$defs"), dict) else {}
        return {**out, "$defs": {**own, **moved}}


def _definitions(schema) -> dict[str, object] | None:
    """What each `$ref` in the schema names; None where one names nothing in it (or not by a local pointer)
    or a keyword moves what refs name: the schema is then one `%json`."""
    found = refs(schema)
    if _keys(schema) & _UNFOLLOWED or not all(isinstance(r, str) for r in found):
        return None
    defs = {ref: resolve(schema, ref) for ref in found}
    return None if any(d is MISSING for d in defs.values()) else defs


def _keys(schema) -> set[str]:
    """Every key anywhere in `schema` (properties' names and data included: a `$id` there is counted, to be safe)."""
    if isinstance(schema, dict):
        return set(schema).union(*(_keys(v) for v in schema.values()))
    return set().union(*(_keys(v) for v in schema)) if isinstance(schema, list) else set()


def _escaped(literal: str) -> str:
    """A literal as llguidance's regex reads it, inside a Lark `/.../`."""
    return "".join(f"\\{c}" if c in r"\.+*?()|[]{}^$#&-~/" else c for c in literal)


def _ref(schema, defs: dict) -> bool:
    return isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and schema["$ref"] in defs \
        and set(schema) <= _WORDS | {"$ref"}


def _any(schema) -> bool:
    """Any JSON value: `true`, or a schema of words alone."""
    return schema is True or isinstance(schema, dict) and set(schema) <= _WORDS


def _plain_number(schema) -> bool:
    return isinstance(schema, dict) and schema.get("type") == "number" and set(schema) <= _WORDS | {"type"}


def _types_apart(schema):
    """`{"type": ["number", "null"]}` (OpenAI's strict mode writes a nullable field so) as the anyOf of its
    types, where nothing but words stands beside the list; any other schema as it is."""
    kinds = schema.get("type") if isinstance(schema, dict) else None
    if not (isinstance(kinds, list) and kinds and all(isinstance(k, str) for k in kinds)
            and set(schema) <= _WORDS | {"type"}):
        return schema
    return {"anyOf": [{"type": k} for k in kinds]}


def _signed(schema) -> str | None:
    """The SIGNED terminal of a number whose one bound is 0 (and nothing else but words), or None."""
    if not (isinstance(schema, dict) and schema.get("type") == "number"):
        return None
    bounds = set(schema) - _WORDS - {"type"}
    bound = bounds.pop() if len(bounds) == 1 else None
    value = schema.get(bound)
    return SIGNED.get(bound) if isinstance(value, int | float) and not isinstance(value, bool) and value == 0 else None


def _plain_object(schema) -> bool:
    if not (isinstance(schema, dict) and schema.get("type") == "object" and set(schema) <= _OBJECT):
        return False
    props, required = schema.get("properties", {}), schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    return (isinstance(props, dict) and all(isinstance(s, dict) for s in props.values())
            and (isinstance(extra, dict) or isinstance(extra, bool))
            and isinstance(required, list) and all(isinstance(r, str) and r in props for r in required))


def _plain_array(schema) -> bool:
    return (isinstance(schema, dict) and schema.get("type") == "array" and set(schema) <= _WORDS | {"type", "items"}
            and isinstance(schema.get("items", True), dict | bool) and schema.get("items") is not False)


def _plain_any_of(schema) -> bool:
    return isinstance(schema, dict) and isinstance(schema.get("anyOf"), list) and set(schema) <= _WORDS | {"anyOf"}
