"""Bounds a JSON schema's integers where it gives none, before a grammar is built from it (structured
output, tool calls' arguments): a grammar that takes any number of digits lets a small model write
`"pop": 1000000...` until max_tokens (a new user's trial: 13,600 zeros)."""

from __future__ import annotations

SAFE_INTEGER = 2**53 - 1
"""The bound an integer takes where its schema gives none: the largest every JSON reader keeps exactly
(JavaScript's Number.MAX_SAFE_INTEGER; llama.cpp's schema grammar caps the digits at 16 likewise)."""
AS_GIVEN = frozenset({"const", "enum", "default", "examples", "not"})
"""Keywords left as given: JSON data, not schemas, and `not` (a bound inside it would widen what it allows)."""


def bounded_integers(schema):
    """A copy of `schema` in which every integer without a bound on a side gets SAFE_INTEGER there."""
    if isinstance(schema, list):
        return [bounded_integers(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: v if k in AS_GIVEN else bounded_integers(v) for k, v in schema.items()}
    kinds = out.get("type")
    if kinds == "integer" or (isinstance(kinds, list) and "integer" in kinds):
        if "maximum" not in out and "exclusiveMaximum" not in out:
            out["maximum"] = SAFE_INTEGER
        if "minimum" not in out and "exclusiveMinimum" not in out:
            out["minimum"] = -SAFE_INTEGER
    return out
