"""Checks for the `hearth` request extension's fields: each failure names the field it is about
(`hearth.workflow.required[1]`), for a 400 in the API's own error shape."""

from __future__ import annotations

from hearth.errors import HearthError


class FieldError(HearthError):
    """A bad value in a `hearth` extension field; `param` is its path in the request body."""

    def __init__(self, param: str, why: str):
        super().__init__(f"{param}: {why}")
        self.param, self.why = param, why


def kind(x) -> str:
    return {dict: "an object", list: "a list", str: "a string", type(None): "null", bool: "a boolean",
            int: "a number", float: "a number"}.get(type(x), type(x).__name__)


def check_keys(value, known: tuple[str, ...], param: str) -> None:
    if not isinstance(value, dict):
        raise FieldError(param, f"must be an object, not {kind(value)}")
    for key in value:
        if key not in known:
            raise FieldError(f"{param}.{key}", f"unknown field; known: {', '.join(known)}")


def int_field(value: dict, key: str, default: int, param: str, low: int = 0, high: int | None = None) -> int:
    got = value.get(key, default)
    if isinstance(got, bool) or not isinstance(got, int):
        raise FieldError(f"{param}.{key}", f"must be an integer, not {kind(got)}")
    if got < low or (high is not None and got > high):
        bounds = f"in [{low}, {high}]" if high is not None else f"at least {low}"
        raise FieldError(f"{param}.{key}", f"must be {bounds}, got {got}")
    return got


def names_field(value: dict, key: str, tool_names: list[str], param: str) -> tuple[str, ...]:
    """A list of tool names, each one of the request's tools."""
    got = value.get(key, [])
    if not isinstance(got, list):
        raise FieldError(f"{param}.{key}", f"must be a list of tool names, not {kind(got)}")
    for i, name in enumerate(got):
        if name not in tool_names:
            raise FieldError(f"{param}.{key}[{i}]", f"must name one of the tools, got {name!r}")
    return tuple(got)
