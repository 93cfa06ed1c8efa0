"""JSON as small models actually write it: fenced in ```json, with trailing commas, single-quoted
Python dicts, True/False/None, unquoted keys, or cut off before the last brace. Each is repaired to
strict JSON with one character scan; valid JSON is never touched."""

from __future__ import annotations

import json
import math
import re
from typing import Any

_FENCE = re.compile(r"\s*```[A-Za-z]*[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_FENCE_OPEN = re.compile(r"```[A-Za-z]*[ \t]*\n?")
_WORDS = {"True": "true", "False": "false", "None": "null", "true": "true", "false": "false",
          "null": "null"}
_SEPARATORS = " \t\r\n;,"


def strip_fence(text: str) -> str:
    """The body of a leading ``` fence (closed or not), else the text itself."""
    m = _FENCE.match(text)
    return m.group(1) if m else text


def finite_number(text: str) -> float:
    """A JSON number as a float; ValueError when a double cannot hold it (1e400): json.dumps would
    write it back as Infinity, which is not JSON (RFC 8259 has no NaN or Infinity)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text} is out of a double's range")
    return value


def _no_constant(word: str) -> None:
    raise ValueError(f"{word} is not JSON")  # Python's json reads NaN, Infinity, -Infinity


def loads(text: str, strict: bool = True) -> Any:
    """json.loads that takes RFC 8259 JSON only, with finite numbers (what json.dumps writes back as JSON)."""
    return json.loads(text, strict=strict, parse_float=finite_number, parse_constant=_no_constant)


def object_error(text: str) -> str:
    """Why `text` is not a JSON object under loads ("" where it is one)."""
    try:
        return "" if isinstance(loads(text), dict) else "the arguments are not a JSON object"
    except ValueError as e:
        return str(e)


def loads_lenient(text: str) -> Any:
    """Parse JSON, repairing what models commonly get wrong; ValueError if it is beyond repair
    (a non-finite number is: the call then stays text, or the guard retries it)."""
    body = strip_fence(text)
    try:
        return loads(body, strict=False)  # strict=False: raw newlines inside strings
    except ValueError:
        return loads(repair_json(body), strict=False)


def split_values(text: str) -> list[str]:
    """The top-level `{...}` / `[...]` values at the start of `text`, separated by whitespace, `;`
    or `,` (Llama 3 joins calls with `;`). Scanning stops at the first other text; a last value cut
    off before its closing bracket runs to the end, for repair_json to close."""
    return _scan(text, 0, len(text))[0]


def _scan(text: str, i: int, end: int) -> tuple[list[str], int]:
    """split_values of text[i:end], and where the scan stopped (after separators)."""
    values = []
    while True:
        while i < end and text[i] in _SEPARATORS:
            i += 1
        if i >= end or text[i] not in "{[":
            return values, i
        j = _value_end(text, i)
        j = end if j < 0 else min(j, end)
        values.append(text[i:j])
        i = j


def leading_values(text: str) -> list[str]:
    """The JSON values at the start of `text`, bare or in ``` fences, one after another: a model that
    makes several calls may fence each one (```json {...} ``` ```json {...} ```). Stops at the first
    other text, at a fence that holds no JSON value (code, not a call), or after a fence whose values
    are followed by other text inside it."""
    values, i = [], 0
    while True:
        got, i = _scan(text, i, len(text))
        values += got
        fence = _FENCE_OPEN.match(text, i)
        if fence is None:
            return values
        close = text.find("```", fence.end())
        close = len(text) if close < 0 else close
        got, j = _scan(text, fence.end(), close)
        if not got:
            return values
        values += got
        if j < close or close == len(text):
            return values
        i = close + 3


def json_values(text: str) -> list[Any]:
    """Every JSON value at the start of `text` (fences allowed), each parsed leniently."""
    return [loads_lenient(v) for v in leading_values(text)]


def cut_off(text: str) -> bool:
    """Whether the JSON values that open `text` (bare or in a ``` fence) end with one cut off before
    its closing bracket or inside a string: an output that stopped in the middle of a value."""
    body, i = strip_fence(text), 0
    while True:
        while i < len(body) and body[i] in _SEPARATORS:
            i += 1
        if i >= len(body) or body[i] not in "{[":
            return False
        i = _value_end(body, i)
        if i < 0:
            return True


def _value_end(text: str, i: int) -> int:
    """The end of the value that opens at `i`; -1 when the text ends before it closes."""
    depth, quote, escaped = 0, "", False
    for j in range(i, len(text)):
        ch = text[j]
        if escaped:
            escaped = False
        elif quote:
            escaped, quote = ch == "\\", "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return j + 1
    return -1


def repair_json(text: str) -> str:
    """Rewrite near-JSON as JSON: 'single' -> "double" quotes, True/False/None -> true/false/null,
    bare keys quoted, trailing commas dropped, an open string and open brackets closed at the end."""
    out: list[str] = []
    closers: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "\"'":
            literal, i = _read_string(text, i)
            out.append(literal)
            continue
        if ch.isalpha() or ch == "_":
            j = i
            while j < len(text) and (text[j].isalnum() or text[j] == "_"):
                j += 1
            out.append(_word(text[i:j], text[j:].lstrip()[:1] == ":"))
            i = j
            continue
        if ch in "{[":
            closers.append("}" if ch == "{" else "]")
        elif ch in "}]":
            _drop_trailing_comma(out)
            if closers:
                closers.pop()
        out.append(ch)
        i += 1
    for closer in reversed(closers):
        _drop_trailing_comma(out)
        out.append(closer)
    _drop_trailing_comma(out)
    return "".join(out)


def _word(word: str, is_key: bool) -> str:
    if is_key and word not in _WORDS:
        return json.dumps(word)
    return _WORDS.get(word, word)


def _read_string(text: str, i: int) -> tuple[str, int]:
    """The string opened by the quote at `i`, as a JSON literal, and the index after it."""
    quote, chars, j = text[i], [], i + 1
    while j < len(text) and text[j] != quote:
        ch = text[j]
        if ch == "\\":
            nxt = text[j + 1:j + 2]  # "" when the text ends on the backslash: drop it
            chars.append("'" if nxt == "'" else "\\" + nxt if nxt else "")  # \' is Python's only
            j += 2
            continue
        chars.append('\\"' if ch == '"' else ch)
        j += 1
    return '"' + "".join(chars) + '"', j + 1


def _drop_trailing_comma(out: list[str]) -> None:
    j = len(out) - 1
    while j >= 0 and out[j].isspace():
        j -= 1
    if j >= 0 and out[j] == ",":
        del out[j]
