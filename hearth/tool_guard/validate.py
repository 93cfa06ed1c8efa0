"""A call's arguments against its tool's JSON schema: required, types, enums/const,
additionalProperties, nested objects and arrays, anyOf/oneOf. Only safe coercions are made, and
each is reported: a numeral string where an integer or number is due ("10" -> 10), an integral
float where an integer is due (3.0 -> 3). An int where a number is due is already valid."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from hearth.tool_parsers.lenient_json import loads
from hearth.tool_parsers.schema import declared_only

_INT = re.compile(r"-?(0|[1-9][0-9]*)")
_NUM = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")
_CHECKS = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}
JSON_TYPES = frozenset(_CHECKS)


@dataclass(frozen=True, slots=True)
class Coercion:
    path: str
    was: Any
    now: Any

    def as_dict(self) -> dict:
        return {"path": self.path, "from": self.was, "to": self.now}


@dataclass(slots=True)
class Verdict:
    value: Any
    """The arguments, coerced where that was safe."""
    errors: list[str] = field(default_factory=list)
    coercions: list[Coercion] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def check_arguments(arguments: str, schema: dict | None) -> Verdict:
    """`arguments`: the call's JSON text (OpenAI's `function.arguments`), against the tool's
    arguments schema with only its declared parameters (declared_only)."""
    try:
        value = loads(arguments or "{}")  # no NaN, no number past a double's range
    except ValueError as e:
        return Verdict(None, [f"arguments are not JSON: {e}"])
    if not isinstance(value, dict):
        return Verdict(value, ["arguments must be a JSON object"])
    verdict = Verdict(value)
    verdict.value = _check(value, declared_only(schema), "arguments", verdict)
    return verdict


def check_value(value: Any, schema: dict | None, path: str = "value") -> Verdict:
    """A JSON value (already parsed) against a schema, as check_arguments checks arguments."""
    verdict = Verdict(value)
    verdict.value = _check(value, schema, path, verdict)
    return verdict


def _check(value: Any, schema: Any, path: str, out: Verdict) -> Any:
    if not isinstance(schema, dict):
        return value
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            value = _one_of(value, schema[key], path, out)
    kinds = _kinds(schema)
    if kinds and not any(_CHECKS.get(k, lambda v: True)(value) for k in kinds):
        coerced = _coerce(value, kinds)
        if coerced is _NO:
            out.errors.append(f"{path}: expected {' or '.join(kinds)}, got {_kind(value)} {_short(value)}")
            return value
        out.coercions.append(Coercion(path, value, coerced))
        value = coerced
    if "enum" in schema and isinstance(schema["enum"], list) and value not in schema["enum"]:
        out.errors.append(f"{path}: {_short(value)} is not one of {json.dumps(schema['enum'])[:200]}")
    if "const" in schema and value != schema["const"]:
        out.errors.append(f"{path}: must be {json.dumps(schema['const'])}")
    if isinstance(value, dict):
        return _object(value, schema, path, out)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_check(v, schema["items"], f"{path}[{i}]", out) for i, v in enumerate(value)]
    return value


def _object(value: dict, schema: dict, path: str, out: Verdict) -> dict:
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    for name in schema.get("required") or []:
        if name not in value:
            out.errors.append(f"{path}: missing required property {name!r}")
    extra = schema.get("additionalProperties", True)
    result = {}
    for key, v in value.items():
        if key in props:
            result[key] = _check(v, props[key], f"{path}.{key}", out)
        elif extra is False:
            allowed = ", ".join(props) or "none"
            out.errors.append(f"{path}: unexpected property {key!r} (allowed: {allowed})")
            result[key] = v
        else:
            result[key] = _check(v, extra, f"{path}.{key}", out) if isinstance(extra, dict) else v
    return result


def _one_of(value: Any, branches: list, path: str, out: Verdict) -> Any:
    """Valid if any branch takes it as it is; else the first branch that takes it coerced."""
    trials = []
    for branch in branches:
        trial = Verdict(value)
        trial.value = _check(value, branch, path, trial)
        if trial.ok and not trial.coercions:
            return trial.value
        trials.append(trial)
    good = next((t for t in trials if t.ok), None)
    if good is None:
        out.errors.append(f"{path}: matches none of the {len(branches)} allowed shapes")
        return value
    out.coercions += good.coercions
    return good.value


_NO = object()


def _coerce(value: Any, kinds: list[str]) -> Any:
    if isinstance(value, str):
        text = value.strip()
        if "integer" in kinds and _INT.fullmatch(text):
            return int(text)
        if "number" in kinds and _NUM.fullmatch(text) and math.isfinite(float(text)):  # "1e400": no double holds it
            n = float(text)
            return int(n) if n.is_integer() and _INT.fullmatch(text) else n
    if "integer" in kinds and isinstance(value, float) and value.is_integer():
        return int(value)
    return _NO


def _kinds(schema: dict) -> list[str]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return [kind]
    return [k for k in kind if isinstance(k, str)] if isinstance(kind, list) else []


def _kind(value: Any) -> str:
    for name in ("boolean", "integer", "number", "string", "object", "array", "null"):
        if _CHECKS[name](value):
            return name
    return type(value).__name__


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."
