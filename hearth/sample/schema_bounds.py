"""Bounds a JSON schema's integers where it gives none, before a grammar is built from it (structured
output, tool calls' arguments): a grammar that takes any number of digits lets a small model write
`"pop": 1000000...` until max_tokens (a new user's trial: 13,600 zeros)."""

from __future__ import annotations

SAFE_INTEGER = 2**53 - 1
"""The bound an integer takes where its schema gives none: the largest every JSON reader keeps exactly
(JavaScript's Number.MAX_SAFE_INTEGER; llama.cpp's schema grammar caps the digits at 16 likewise)."""
AS_GIVEN = frozenset({"const", "enum", "default", "examples", "not"})
"""Keywords left as given: JSON data, not schemas, and `not` (a bound inside it would widen what it allows)."""
NAMED_SCHEMAS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
"""Keywords whose values map names to schemas: the names are not keywords (a property may be `default`)."""


def bounded_integers(schema):
    """A copy of `schema` in which every integer without a bound on a side gets SAFE_INTEGER there,
    unless the other side's bound is already past it (no bound then: never an unsatisfiable schema)."""
    if isinstance(schema, list):
        return [bounded_integers(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: v if k in AS_GIVEN else
           {name: bounded_integers(s) for name, s in v.items()} if k in NAMED_SCHEMAS and isinstance(v, dict) else
           bounded_integers(v) for k, v in schema.items()}
    kinds = out.get("type")
    if kinds == "integer" or (isinstance(kinds, list) and "integer" in kinds):
        low, high = _given(out, "minimum", "exclusiveMinimum"), _given(out, "maximum", "exclusiveMaximum")
        if high is None and (low is None or low < SAFE_INTEGER):
            out["maximum"] = SAFE_INTEGER
        if low is None and (high is None or high > -SAFE_INTEGER):
            out["minimum"] = -SAFE_INTEGER
    return out


def _given(schema: dict, *keys: str) -> float | None:
    """The bound the schema gives on a side, or None (a side with a non-numeric bound counts as given)."""
    values = [schema[k] for k in keys if k in schema]
    numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    return numbers[0] if numbers else (float("nan") if values else None)
