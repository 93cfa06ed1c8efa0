"""Which calls the call grammar holds: calls that may go out to a client while they are written
(issue 21's streamed calls under issue 20's guard), because nothing the guard does after them
could reject or change them.

A call is held when (1) its tool's schema is one whose every instance the grammar admits passes
hearth.tool_guard.validate unchanged, and (2) its region of the output holds only what the grammar
wrote. (1) is a walk over the schema with only keywords whose grammar (llguidance) semantics are at
least as strict as the validator's: a keyword the validator does not check (minimum, pattern,
format, ...) cannot reject; patternProperties, prefixItems, allOf, $ref, oneOf and anything unknown
are not held. Every object must be closed (additionalProperties false, as OpenAI's strict mode
asks): in an open one the grammar admits a repeated key, which the streamed call carries as the
model wrote it (hearth.tool_parsers.early_call), and JSON parsers read a repeated key differently
(Python and JavaScript keep the last, others the first or refuse it), so the client's reading may
not be the one the guard checked. (2) a `<tool_call>`
region holds exactly the one object the grammar forced; a call that opens an answer (bare object,
fence, doubled brace) is followed by free text the parser may read more calls from, so it is held
only when the grammar ends the answer after it (parallel_tool_calls false, or a forced call)."""

from __future__ import annotations

from typing import Any

from hearth.tool_guard.confidence import openers
from hearth.tool_guard.triggers import TAGGED, triggers_for
from hearth.tool_guard.validate import JSON_TYPES, check_value
from hearth.tool_parsers.schema import declared_only

_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$comment", "deprecated", "readOnly",
                          "writeOnly", "$schema"})
_UNCHECKED = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength",
                        "maxLength", "pattern", "format", "minItems", "maxItems", "minProperties", "maxProperties"})
"""Restrictions the grammar enforces and the validator does not check: they cannot reject a call."""
_SHAPES = frozenset({"type", "enum", "const", "properties", "required", "additionalProperties", "items", "anyOf"})
"""What the validator checks, each enforced by the grammar the same way or more strictly."""
_KNOWN = _ANNOTATIONS | _UNCHECKED | _SHAPES


def schema_held(schema: Any) -> bool:
    """Whether every arguments object the call grammars (lazy and forced, both over declared_only)
    admit for a tool with this arguments schema passes the guard's validation with no error and no
    coercion."""
    checked = declared_only(schema)
    if set(checked) <= _ANNOTATIONS | {"type"} and checked.get("type") == "object":
        return True  # any object: with a repeated key, whichever value a parser keeps, still an object
    return _holds(checked)


def _holds(s: Any) -> bool:
    if s is False:
        return True
    if not isinstance(s, dict) or not set(s) <= _KNOWN:
        return False
    if "anyOf" in s and not (isinstance(s["anyOf"], list) and s["anyOf"] and all(_holds(b) for b in s["anyOf"])):
        return False
    values = list(s.get("enum") or []) + ([s["const"]] if "const" in s else [])
    if not all(_literal_fits(v, s) for v in values):
        return False  # a value the validator would coerce or refuse
    kinds = _kinds(s)
    if kinds is None or (not kinds and not values and "anyOf" not in s):
        return False  # untyped: any JSON, open objects included
    if "object" in kinds and not _closed_object(s):
        return False
    return "array" not in kinds or _holds(s.get("items"))


def _kinds(s: dict) -> list[str] | None:
    """The node's JSON types ([] when it names none); None when one is not a JSON type."""
    kind = s.get("type", [])
    kinds = [kind] if isinstance(kind, str) else kind
    if not isinstance(kinds, list) or not all(isinstance(k, str) and k in JSON_TYPES for k in kinds):
        return None
    return kinds


def _closed_object(s: dict) -> bool:
    props = s.get("properties", {})
    required = s.get("required", [])
    if s.get("additionalProperties") is not False or not isinstance(props, dict) or not isinstance(required, list):
        return False
    return set(required) <= set(props) and all(_holds(p) for p in props.values())


def _literal_fits(value: Any, s: dict) -> bool:
    verdict = check_value(value, s)
    return verdict.ok and not verdict.coercions


def region_held(text: str, fmt: str, k: int, parallel: bool, forced: bool) -> bool:
    """Whether call k of an output (the text so far, its call k begun) sits alone in a region the
    grammar wrote: the k-th call opener, counted the grammar's way, is call k's, and it is a tagged
    call or the grammar ends the answer after this first call."""
    found = openers(text, triggers_for(fmt))
    if len(found) != k + 1:  # an opener the parser did not read as a call (reasoning, ...): unsure
        return False
    return found[k][1].body == TAGGED or ((forced or not parallel) and k == 0)
