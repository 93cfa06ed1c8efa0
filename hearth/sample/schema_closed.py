"""Closes a JSON schema's objects where it leaves them open, before a grammar is built from it
(structured output, Ollama's `format`, tool calls' arguments): an object schema that names its
`properties` and says nothing of others takes only those, as llama.cpp's json-schema-to-grammar
(Ollama's `format`) and xgrammar's strict mode (vLLM's default) read it. JSON Schema's own reading
(any other key allowed) let a small model go on after the last property: a pydantic model's schema
(no additionalProperties) gave `{"name":"Rex","age":3,"description":{...` to the token limit, invalid
JSON where Ollama's answer ends after `age` (a new user's trial)."""

from __future__ import annotations

from typing import Any

from hearth.sample.schema_bounds import AS_GIVEN, NAMED_SCHEMAS

OPEN_KEYS = frozenset({"additionalProperties", "patternProperties", "unevaluatedProperties", "allOf", "$ref"})
"""An object schema with any of these says itself what else it takes (or combines with others that
may name more properties): left as given."""


def closed_objects(schema: Any) -> Any:
    """A copy of `schema` whose objects with `properties` and none of OPEN_KEYS take no other key."""
    return _closed(schema, close=True)


def _closed(schema: Any, close: bool) -> Any:
    if isinstance(schema, list):
        return [_closed(s, close) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: v if k in AS_GIVEN else
           {name: _closed(s, True) for name, s in v.items()} if k in NAMED_SCHEMAS and isinstance(v, dict) else
           _closed(v, k != "allOf")  # allOf's branches add up to one object: each stays open
           for k, v in schema.items()}
    if close and isinstance(out.get("properties"), dict) and not OPEN_KEYS & out.keys():
        out["additionalProperties"] = False
    return out
