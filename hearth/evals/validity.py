"""Is a response's tool call well-formed: a call of an offered tool whose arguments are a JSON
object valid against that tool's schema (types, required, enum, items, and no parameter the
schema does not list: every BFCL tool lists all of its parameters)? And did a response that came
back as text try to call (a call the server could not parse stays in the content)?

This is the measuring stick, so it is written apart from the server's own parsing and guards."""

from __future__ import annotations

import json
import re

from hearth.evals.bfcl_tools import ToolSet

# the wrong-but-common shapes a call takes when it misses the format: tags, a bare or fenced JSON
# object with a name, the doubled-brace form of Qwen's template, <function=...>
CALL_MARKERS = re.compile(r'<tool_call>|<function=|\{\s*\{?\s*"name"\s*:|```json\s*\{')

_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool}


def looks_like_call(text: str | None) -> bool:
    return bool(text) and CALL_MARKERS.search(text) is not None


def schema_errors(value, schema: dict, path: str = "arguments", top: bool = True) -> list[str]:
    errors = []
    t = schema.get("type")
    if t == "integer":
        ok = type(value) is int or (type(value) is float and value.is_integer())
    elif t == "number":
        ok = type(value) in (int, float)
    elif t in _TYPES:
        ok = type(value) is _TYPES[t]
    else:
        ok = True
    if not ok:
        return [f"{path}: expected {t}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} is not one of {schema['enum']!r}")
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        errors += [f"{path}.{p}: required" for p in schema.get("required", []) if p not in value]
        for k, v in value.items():
            if k in props:
                errors += schema_errors(v, props[k], f"{path}.{k}", False)
            elif top or schema.get("additionalProperties") is False:
                errors.append(f"{path}.{k}: not a parameter")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, v in enumerate(value):
            errors += schema_errors(v, schema["items"], f"{path}[{i}]", False)
    return errors


def call_errors(call: dict, toolset: ToolSet) -> list[str]:
    """Problems of one OpenAI `tool_calls[i]`; [] when it is a valid call of an offered tool."""
    fn = call.get("function") or {}
    name = fn.get("name")
    schema = toolset.schema(name)
    if schema is None:
        return [f"{name!r} is not an offered tool"]
    try:
        args = json.loads(fn.get("arguments") or "{}")
    except ValueError as e:
        return [f"{name}: arguments are not JSON ({e})"]
    if not isinstance(args, dict):
        return [f"{name}: arguments are not an object"]
    return schema_errors(args, schema)
