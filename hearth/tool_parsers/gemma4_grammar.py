"""A forced Gemma 4 call as an llguidance Lark grammar. Its arguments are not JSON, so no JSON schema
grammar fits: each tool's schema becomes rules of Gemma's object syntax instead — its declared keys
only, each with its own value's type (strings between `<|"|>` marks, integers, numbers, booleans,
enums, nested objects and lists); what a schema leaves open takes any Gemma value. Keys may come in
any order, so required ones are not enforced here (the guard's schema check reports a missing one)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from hearth.tool_parsers.gemma4 import CALL, END, QUOTE, REASONING_TEXT, START

_TERMINALS = {
    "string": "gstr",
    "integer": "G_INT",
    "number": "G_NUM",
    "boolean": '("true" | "false")',
    "null": '"null"',
}
_COMMON = [
    f"gstr[lazy]: /{re.escape(QUOTE)}(.|\\n)*{re.escape(QUOTE)}/",
    "G_INT: /-?(0|[1-9][0-9]*)/",
    "G_NUM: /-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][-+]?[0-9]+)?/",
    "gvalue: gstr | G_NUM | \"true\" | \"false\" | \"null\" | gobject | glist",
    "gobject: \"{\" (gkey \":\" gvalue (\",\" gkey \":\" gvalue)*)? \"}\"",
    "glist: \"[\" (gvalue (\",\" gvalue)*)? \"]\"",
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
        if kind == "object" and isinstance(schema.get("properties"), dict) and schema["properties"]:
            return self.object(schema["properties"])
        if kind == "array" and isinstance(schema.get("items"), dict):
            item = self.value(schema["items"])
            return self._rule(f'"[" ({item} ("," {item})*)? "]"')
        return _TERMINALS.get(kind, "gvalue") if isinstance(kind, str) else "gvalue"

    def object(self, properties: dict) -> str:
        members = " | ".join(f"{json.dumps(str(key) + ':')} {self.value(schema)}" for key, schema in properties.items())
        member = self._rule(members)
        return self._rule(f'"{{" ({member} ("," {member})*)? "}}"')

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
    """Lark rules where `rule` is one call after `call:`: a tool's name, then its arguments, each
    declared key typed by that tool's schema."""
    rules = _Rules()
    branches = []
    for name, schema in schemas.items():
        properties = schema.get("properties") if isinstance(schema, dict) else None
        args = rules.object(properties) if isinstance(properties, dict) and properties else "gobject"
        branches.append(f"{json.dumps(name)} {args}")
    return [f"{rule}: {' | '.join(branches)}", *rules.lines, *_COMMON]


@dataclass(frozen=True, slots=True)
class Gemma4CallConstraint:
    schemas: dict[str, dict]
    """Each callable tool's arguments schema, by name."""

    def lark(self) -> str:
        opens, closes = REASONING_TEXT
        return "\n".join([
            "%llguidance {}",
            f"start: thought? {json.dumps(START + CALL)} call {json.dumps(END)}",
            f"thought[lazy]: /{re.escape(opens)}(.|\\n)*{re.escape(closes)}/",
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
