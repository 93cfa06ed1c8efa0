"""Bounds a JSON schema's numbers where it gives none, before a grammar is built from it (structured
output, tool calls' arguments): a grammar that takes any number of digits lets a small model write
`"pop": 1000000...` until max_tokens (a new user's trial: 13,600 zeros), or a float's digits
`0.333333...` without end. llama.cpp's json-schema-to-grammar caps a number's integer part at 16
digits and its fraction and exponent at 16 each; llguidance takes bounds only as minimum/maximum and
multipleOf, so hearth bounds the value and the fraction's digits (a bounded llguidance number has no
exponent: where the schema leaves a number plain, hearth.sample.schema_lark writes it as a terminal
bounded in digits that keeps one).

No grammar engine here: the caller's own compile says whether the bounded copy holds."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any, TypeVar

R = TypeVar("R")

SAFE_INTEGER = 2**53 - 1
"""The bound an integer takes where its schema gives none: the largest every JSON reader keeps exactly
(JavaScript's Number.MAX_SAFE_INTEGER; llama.cpp's schema grammar caps the digits at 16 likewise)."""
NUMBER_LIMIT = 10**15
"""A number (float) without a bound on a side stays under this there (exclusive): at most 15 integer
digits, as many as a double keeps exactly (llama.cpp takes 16)."""
NUMBER_STEP = 1e-10
"""A number without its own multipleOf is a multiple of this: at most 10 fraction digits (llama.cpp
takes 16; llguidance refuses a finer step, which a double does not hold exactly)."""
AS_GIVEN = frozenset({"const", "enum", "default", "examples", "not"})
"""Keywords left as given: JSON data, not schemas, and `not` (a bound inside it would widen what it allows)."""
NAMED_SCHEMAS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
"""Keywords whose values map names to schemas: the names are not keywords (a property may be `default`)."""

_VALUE = {"$ref": "#/$defs/value"}
ANY_OBJECT = {"$defs": {"value": {"anyOf": [
    {"type": "null"}, {"type": "boolean"}, {"type": "number"}, {"type": "string"},
    {"type": "array", "items": _VALUE}, {"type": "object", "additionalProperties": _VALUE}]}},
    "type": "object", "additionalProperties": _VALUE}
"""response_format json_object: any JSON object, its values spelled out so their numbers are bounded
(`{"type": "object"}` left them open: SmolLM2 wrote `{", ":1000...` to max_tokens; llama.cpp's json.gbnf
caps a number's digits too)."""


def with_bounded_numbers(schema: Any, compile: Callable[[Any], R]) -> R:
    """compile(a copy of `schema` with bounded numbers); where that raises ValueError, compile(schema)
    as given, whose own error (if any) then names what is wrong in the schema itself.

    In the copy every integer without a bound on a side gets SAFE_INTEGER there, and every number
    NUMBER_LIMIT and a step of NUMBER_STEP, unless that contradicts what the schema gives (a bound on
    the other side past ours, a range holding no multiple of the step: no bound then). A `const` or
    `enum` ends by itself and is left as given. Each subschema is bounded on its own, so a bound given
    beside an `allOf` or a `$ref` can still meet ours in one instance and make the copy unsatisfiable:
    the caller's compile finds that, none is spent on a check of its own (~1 ms for a number, one thread)."""
    bounded = _bounded(schema)
    if bounded == schema:
        return compile(schema)
    try:
        return compile(bounded)
    except ValueError:
        return compile(schema)


def _bounded(schema):
    if isinstance(schema, list):
        return [_bounded(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: v if k in AS_GIVEN else
           {name: _bounded(s) for name, s in v.items()} if k in NAMED_SCHEMAS and isinstance(v, dict) else
           _bounded(v) for k, v in schema.items()}
    kinds = out.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "const" in out or "enum" in out:
        return out
    if "number" in kinds:
        _bound(out, NUMBER_LIMIT, "exclusiveMaximum", "exclusiveMinimum")
        if "multipleOf" not in out and _holds_a_step(out):
            out["multipleOf"] = NUMBER_STEP
    elif "integer" in kinds:
        _bound(out, SAFE_INTEGER, "maximum", "minimum")
    return out


def _bound(schema: dict, limit: int, high_key: str, low_key: str) -> None:
    """±limit on each side the schema leaves open, unless its other side is already past it."""
    low, high = _given(schema, "minimum", "exclusiveMinimum"), _given(schema, "maximum", "exclusiveMaximum")
    if high is None and (low is None or low < limit):
        schema[high_key] = limit
    if low is None and (high is None or high > -limit):
        schema[low_key] = -limit


def _given(schema: dict, *keys: str) -> float | None:
    """The bound the schema gives on a side, or None (a side with a non-numeric bound counts as given)."""
    values = [schema[k] for k in keys if k in schema]
    numbers = [v for v in values if _number(v)]
    return numbers[0] if numbers else (float("nan") if values else None)


def _holds_a_step(schema: dict) -> bool:
    """Whether a multiple of NUMBER_STEP lies within the schema's bounds (an open side always holds
    some); False where a bound is not a number (nothing is known)."""
    bounds = {k: schema[k] for k in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum") if k in schema}
    if not all(_number(v) for v in bounds.values()):
        return False
    step = Decimal(repr(NUMBER_STEP))
    lows = [(Decimal(repr(v)), k == "exclusiveMinimum") for k, v in bounds.items() if k.endswith("inimum")]
    highs = [(Decimal(repr(v)), k == "exclusiveMaximum") for k, v in bounds.items() if k.endswith("aximum")]
    if not lows or not highs:
        return True
    low, open_low = max(lows)  # the tightest: at a tie, the exclusive one
    high, open_high = min(highs, key=lambda b: (b[0], not b[1]))
    first = (low / step).to_integral_value(rounding="ROUND_CEILING") * step
    if open_low and first == low:
        first += step
    return first < high or (first == high and not open_high)


def _number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)
