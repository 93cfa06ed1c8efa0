"""JSON as small models actually write it: fenced in ```json, with trailing commas, single-quoted
Python dicts, True/False/None, unquoted keys, or cut off before the last brace. Each is repaired to
strict JSON with one character scan; valid JSON is never touched."""

from __future__ import annotations

import json
import re
from typing import Any

_FENCE = re.compile(r"\s*```[A-Za-z]*[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_WORDS = {"True": "true", "False": "false", "None": "null", "true": "true", "false": "false",
          "null": "null"}
_SEPARATORS = " \t\r\n;,"


def strip_fence(text: str) -> str:
    """The body of a leading ``` fence (closed or not), else the text itself."""
    m = _FENCE.match(text)
    return m.group(1) if m else text


def loads_lenient(text: str) -> Any:
    """Parse JSON, repairing what models commonly get wrong; ValueError if it is beyond repair."""
    body = strip_fence(text)
    try:
        return json.loads(body, strict=False)  # strict=False: raw newlines inside strings
    except ValueError:
        return json.loads(repair_json(body), strict=False)


def split_values(text: str) -> list[str]:
    """The top-level `{...}` / `[...]` values at the start of `text`, separated by whitespace, `;`
    or `,` (Llama 3 joins calls with `;`). Scanning stops at the first other text; a last value cut
    off before its closing bracket runs to the end, for repair_json to close."""
    values, i = [], 0
    while True:
        while i < len(text) and text[i] in _SEPARATORS:
            i += 1
        if i >= len(text) or text[i] not in "{[":
            return values
        end = _value_end(text, i)
        values.append(text[i:end])
        i = end


def json_values(text: str) -> list[Any]:
    """Every JSON value at the start of `text` (fence allowed), each parsed leniently."""
    return [loads_lenient(v) for v in split_values(strip_fence(text))]


def _value_end(text: str, i: int) -> int:
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
    return len(text)


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
