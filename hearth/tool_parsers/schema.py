"""What to constrain decoding to when tool_choice forces a call ("required" / Anthropic "any", or a
named tool): a JSON schema for one call object, and the format's text around it, so a grammar
engine (llguidance) can force `prefix + json + suffix`. Each branch of the schema pins `name` and
that tool's own arguments schema together, so a valid name cannot carry another tool's arguments."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass

import llguidance

from hearth.sample.schema_bounds import with_bounded_numbers
from hearth.sample.schema_lark import CALL_LAYOUT, value_rules, with_terminals
from hearth.sample.schema_refs import pointer, rebased
from hearth.tool_parsers.formats import get_format
from hearth.tool_parsers.gemma4_grammar import Gemma4CallConstraint
from hearth.tool_parsers.types import ToolParserError, tool_parameters

# format -> (prefix, suffix, key of the arguments): what its parser reads back as one call.
# qwen_xml gets hermes JSON inside its tags (its parser accepts that) because a JSON schema cannot
# describe the XML; mistral gets the one-element list of its v3 form.
_WRAPPERS = {
    "hermes": ("<tool_call>\n", "\n</tool_call>", "arguments"),
    "qwen_xml": ("<tool_call>\n", "\n</tool_call>", "arguments"),
    "mistral": ("[TOOL_CALLS][", "]", "arguments"),
    "llama3_json": ("", "", "parameters"),
    "bare_json": ("", "", "arguments"),
}
_OWN_GRAMMARS = {"gemma4": Gemma4CallConstraint}
"""Formats whose arguments are not JSON: a grammar of their own syntax, from each tool's schema."""
TOOL_JSON = {"whitespace_pattern": CALL_LAYOUT, "lenient": True}
"""llguidance's options for a tool's arguments in a call grammar: bounded layout between JSON
tokens (with any amount a small model may pad forever), and lenient: a keyword it cannot enforce
(uniqueItems, not, if/then, contains, an unknown format, overlapping oneOf: valid JSON Schema,
pydantic writes some of them) is left to the guard's validation instead of refusing the request."""
_FORCING = ("required", "any")  # OpenAI's and Anthropic's words for "some tool, your pick"


@dataclass(frozen=True, slots=True)
class CallConstraint:
    prefix: str
    schema: dict
    suffix: str
    key: str = "arguments"
    """The key its call object writes the arguments under."""

    def lark(self) -> str:
        """The constraint as an llguidance Lark grammar. Markers that are special tokens in the
        model's vocabulary ([TOOL_CALLS], <|python_tag|>) need the grammar's token syntax instead."""
        body = [json.dumps(self.prefix)] if self.prefix else []
        body += ["call"] + ([json.dumps(self.suffix)] if self.suffix else [])
        return "\n".join(with_terminals([f"start: {' '.join(body)}", *json_rules("call", self.schema)])) + "\n"

    def call_text(self, name: str, arguments: dict) -> str:
        """A call of `name` as this grammar writes it."""
        return self.prefix + json.dumps({"name": name, self.key: arguments}) + self.suffix


@dataclass(frozen=True, slots=True)
class NamedCallConstraint:
    """A forced call whose tool name is text before its arguments, not a JSON key (harmony:
    `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}`), after an optional
    reasoning message: the format record's CALL_TEXT and REASONING_TEXT. One branch per tool pins its
    name to its own arguments' schema."""
    head: str
    between: str
    schemas: dict[str, dict]
    reasoning: tuple[str, str] | None = None

    def lark(self) -> str:
        lines = ["%llguidance {}", f"start: {'reasoning? ' if self.reasoning else ''}{json.dumps(self.head)} call"]
        branches = []
        for i, (name, schema) in enumerate(self.schemas.items()):
            lines += json_rules(f"args_{i}", declared_only(schema))
            branches.append(f"{json.dumps(name)} {json.dumps(self.between)} args_{i}")
        lines.append(f"call: {' | '.join(branches)}")
        if self.reasoning:
            opens, closes = self.reasoning
            end = closes.index(">") + 1  # a lazy lexeme: the thought runs to its end marker's first occurrence
            lines += [f"reasoning: thought {json.dumps(closes[end:])}",
                      f"thought[lazy]: /{re.escape(opens)}(.|\\n)*{re.escape(closes[:end])}/"]
        return "\n".join(with_terminals(lines)) + "\n"

    def call_text(self, name: str, arguments: dict) -> str:
        """A call of `name` as this grammar writes it."""
        return self.head + name + self.between + json.dumps(arguments)


def forced_tools(tools: list[dict] | None, tool_choice: str | dict | None) -> list[str] | None:
    """The tool names a forced output must call one of; None when tool_choice leaves the model
    free (absent, "auto", "none"). ToolParserError for a choice naming no offered tool."""
    names = list(tool_parameters(tools))
    kind = tool_choice.get("type") if isinstance(tool_choice, dict) else tool_choice
    if kind in _FORCING:
        return names
    if kind not in ("function", "tool"):
        return None
    fn = tool_choice.get("function")
    name = fn.get("name") if isinstance(fn, dict) else tool_choice.get("name")
    if not isinstance(name, str):  # it read "names None, which is not one of the tools"
        where = "function.name" if kind == "function" else "name"
        raise ToolParserError(f"tool_choice needs the tool's name in {where} for type {kind!r} "
                              f"(one of: {', '.join(names) or 'no tools were given'})")
    if name not in names:
        raise ToolParserError(f"tool_choice names {name!r}, which is not one of the tools")
    return [name]


def tool_call_schema(tools: list[dict] | None, tool_choice: str | dict,
                     arguments_key: str = "arguments") -> dict:
    """JSON schema of one call object `{"name": ..., arguments_key: {...}}` that tool_choice allows."""
    names = forced_tools(tools, tool_choice)
    if not names:
        raise ToolParserError(f"tool_choice {tool_choice!r} forces no call (or no tools were given)")
    params = tool_parameters(tools)
    branches = [_call_schema(name, params[name], arguments_key) for name in names]
    return branches[0] if len(branches) == 1 else {"anyOf": [rebased(b, pointer("anyOf", str(i)))
                                                             for i, b in enumerate(branches)]}


def call_constraint(fmt: str, tools: list[dict] | None,
                    tool_choice: str | dict) -> CallConstraint | NamedCallConstraint | Gemma4CallConstraint:
    """Schema and wrapper for one forced call in format `fmt`."""
    record = get_format(fmt)  # a clear error for an unknown name
    named, own = getattr(record, "CALL_TEXT", None), _OWN_GRAMMARS.get(fmt)
    if named is not None or own is not None:  # the name is text of its own: one grammar branch per tool
        params = tool_parameters(tools)
        names = forced_tools(tools, tool_choice)
        if not names:
            raise ToolParserError(f"tool_choice {tool_choice!r} forces no call (or no tools were given)")
        if own is not None:
            return own({n: declared_only(params[n]) for n in names})
        return NamedCallConstraint(*named, {n: params[n] for n in names}, getattr(record, "REASONING_TEXT", None))
    prefix, suffix, key = _WRAPPERS[fmt]
    return CallConstraint(prefix, tool_call_schema(tools, tool_choice, key), suffix, key)


def declared_only(schema: dict | None) -> dict:
    """A tool's arguments schema with its declared parameters the only ones (as BFCL scores and
    OpenAI's strict mode requires): a name the tool does not list is the model's mistake (small
    models echo the schema itself as arguments). A schema that sets additionalProperties, lists no
    properties, or requires a parameter it does not declare (closed, nothing would satisfy it), is
    left as it is."""
    schema = schema if isinstance(schema, dict) else {}
    props, required = schema.get("properties"), schema.get("required", [])
    names = isinstance(required, list) and all(isinstance(r, str) for r in required)  # [[1]] is no set: a 500
    if isinstance(props, dict) and "additionalProperties" not in schema and names and set(required) <= set(props):
        return {**schema, "additionalProperties": False}
    return schema or {"type": "object"}


def _call_schema(name: str, parameters: dict, arguments_key: str) -> dict:
    """The call object's schema; the arguments' local `$ref`s point where they now stand (they named nothing:
    llguidance refused the grammar of a tool whose parameters have `$defs`, as a pydantic model's nested ones)."""
    arguments = rebased(declared_only(parameters), pointer("properties", arguments_key))
    return {"type": "object",
            "properties": {"name": {"const": name}, arguments_key: arguments},
            "required": ["name", arguments_key], "additionalProperties": False}


def bounded_arguments(schema: dict) -> dict:
    """`schema` with its numbers bounded (hearth.sample.schema_bounds) where that copy compiles as a
    call's arguments do (TOOL_JSON), else as given. The compile is schema_error's, cached by the text:
    the grammar that embeds the schema is compiled later, whole, where no tool's fallback can be chosen.
    A schema that does not compile as given either goes as given: that later compile names its error."""
    try:
        return with_bounded_numbers(schema, _compiled)
    except ValueError:
        return schema


def call_json(schema: dict) -> dict:
    """What a call grammar's `%json` embeds for `schema`: its numbers bounded, TOOL_JSON's options."""
    schema = bounded_arguments(schema)
    return {**schema, "x-guidance": {**TOOL_JSON, **schema.get("x-guidance", {})}}


def json_rules(rule: str, schema: dict) -> list[str]:
    """Lark rules for `rule`, one JSON value of `schema` (a number keeps its exponent: hearth.sample.schema_lark);
    a grammar holding them ends with_terminals."""
    return value_rules(rule, schema, call_json, gap=True)


def _compiled(schema: dict) -> dict:
    if _schema_error(json.dumps({**schema, "x-guidance": TOOL_JSON}, sort_keys=True)):
        raise ValueError("the schema does not compile")
    return schema


@functools.lru_cache(maxsize=4096)  # many-tools requests (hearth.max_tools) send hundreds
def _schema_error(text: str) -> str | None:
    grammar = llguidance.LLMatcher.grammar_from_json_schema(text)
    error = llguidance.LLMatcher.validate_grammar(grammar)
    return error.strip().splitlines()[0] if error else None


def schema_error(schema: dict) -> str | None:
    """Why a tool's arguments schema cannot be a call grammar (a type JSON Schema does not have:
    "dict", "float", ...), or None. Agents send the same tools every turn: cached by the text."""
    try:
        return _schema_error(json.dumps({**declared_only(schema), "x-guidance": TOOL_JSON}, sort_keys=True))
    except ValueError as e:  # grammar_from_json_schema refused it outright
        return str(e).strip().splitlines()[0]
