"""A forced Gemma 4 call as an llguidance Lark grammar. Its arguments are not JSON, so no JSON schema
grammar fits: each tool's schema becomes rules of Gemma's object syntax instead — each value typed as
its schema says (strings between `<|"|>` marks, integers, numbers, booleans, enums, objects, lists),
an object's declared keys, and any other key where the object is open (JSON Schema's default; the
callers close a tool's own arguments as the JSON formats' grammars do, hearth.tool_parsers.schema.
declared_only). Numbers are bounded as hearth.sample.schema_bounds bounds JSON's: at most 16 integer
digits, 15 before and 10 after a point, no exponent (a small model writes digits without end, and
`1e999` reads back as no number). Keys come in the sorted order the template writes them in (its tool
declarations and past calls alike), so the required ones are enforced; minimum, maximum and string lengths
are left to the guard's schema check."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from hearth.tool_parsers.gemma4 import CALL, END, QUOTE, START
from hearth.tool_parsers.reasoning import GEMMA_THOUGHT

_TERMINALS = {
    "string": "gstr",
    "integer": "G_INT",
    "number": "G_NUM",
    "boolean": '("true" | "false")',
    "null": '("null" | "None")',  # Jinja writes Python's None
}
_COMMON = [
    f"gstr[lazy]: /{re.escape(QUOTE)}(.|\\n)*{re.escape(QUOTE)}/",
    "G_INT: /-?(0|[1-9][0-9]{0,15})/",
    "G_NUM: /-?(0|[1-9][0-9]{0,14})(\\.[0-9]{1,10})?/",
    'gvalue: gstr | G_NUM | "true" | "false" | "null" | "None" | gobject | glist',
    'gobject: "{" (gmember ("," gmember)*)? "}"',
    'gmember: gkey ":" gvalue',
    'glist: "[" (gvalue ("," gvalue)*)? "]"',
    "gkey: /[^:{}\\[\\],<]+/ | gstr",
]


@dataclass
class _Rules:
    lines: list[str] = field(default_factory=list)

    def value(self, schema: Any) -> str:
        """The rule (or terminal) of one value that `schema` describes."""
        if not isinstance(schema, dict):
            return "gvalue"
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return "(" + " | ".join(json.dumps(_literal(v)) for v in schema["enum"]) + ")"
        kind = schema.get("type")
        if kind == "object":
            return self.object(schema)
        if kind == "array" and isinstance(schema.get("items"), dict):
            item = self.value(schema["items"])
            return self._rule(f'"[" ({item} ("," {item})*)? "]"')
        return _TERMINALS.get(kind, "gvalue") if isinstance(kind, str) else "gvalue"

    def object(self, schema: dict) -> str:
        """An object: its declared keys typed, in the sorted order the template writes them (its `dictsort`), the
        required ones present, then any other key unless additionalProperties is false."""
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        required = set(schema.get("required") or ()) if isinstance(schema.get("required"), list) else set()
        members = [(f"{json.dumps(str(key) + ':')} {self.value(properties[key])}", key in required)
                   for key in sorted(properties, key=str)]
        open_ = schema.get("additionalProperties") is not False
        body = self._members(members, open_)
        return self._rule(f'"{{" {body} "}}"' if body else '"{" "}"')

    def _members(self, members: list[tuple[str, bool]], open_: bool) -> str:
        """The members, each (Lark, required), separated by commas: one rule per member and state (none has come
        yet, or some has), each naming the next member's, so the grammar grows linearly with the members (written
        out inline, each optional member doubled what followed it)."""
        first = '(gmember ("," gmember)*)?' if open_ else ""  # after the last member: any other key if open
        rest = '("," gmember)*' if open_ else ""
        for member, required in reversed(members):
            here = f'"," {member} {rest}'.strip()
            new_first = f"{member} {rest}".strip()
            rest = self._rule(here if required else f'("," {member})? {rest}'.strip())
            new_first = new_first if required else f"{new_first} | {first}" if first else f"({new_first})?"
            first = self._rule(new_first)
        return first

    def _rule(self, body: str) -> str:
        name = f"g_{len(self.lines)}"
        self.lines.append(f"{name}: {body}")
        return name


def _literal(value: Any) -> str:
    """An enum value as the template writes it."""
    if isinstance(value, str):
        return QUOTE + value + QUOTE
    return json.dumps(value)


def call_rules(schemas: dict[str, dict], rule: str) -> list[str]:
    """Lark rules where `rule` is one call after `call:`: a tool's name, then its arguments as that
    tool's schema types them."""
    rules = _Rules()
    branches = [f"{json.dumps(name)} {rules.object(schema if isinstance(schema, dict) else {})}"
                for name, schema in schemas.items()]
    return [f"{rule}: {' | '.join(branches)}", *rules.lines, *_COMMON]


@dataclass(frozen=True, slots=True)
class Gemma4CallConstraint:
    schemas: dict[str, dict]
    """Each callable tool's arguments schema, by name (closed as declared_only closes it)."""

    def lark(self) -> str:
        thought = f"{re.escape(GEMMA_THOUGHT.open)}(.|\\n)*{re.escape(GEMMA_THOUGHT.close)}"
        return "\n".join([
            "%llguidance {}",
            f"start: thought? {json.dumps(START + CALL)} call {json.dumps(END)}",
            f"thought[lazy]: /{thought}/",
            *call_rules(self.schemas, "call")]) + "\n"

    def call_text(self, name: str, arguments: dict) -> str:
        """A call of `name` as this grammar writes it (and the template shows the model)."""
        return f"{START}{CALL}{name}{_value(arguments)}{END}"


def _value(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_value(v) for v in value) + "]"
    return _literal(value)
