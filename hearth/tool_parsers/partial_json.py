"""The part of a JSON value, still being written, that is already certain: its text as
`json.dumps(value, ensure_ascii=False)` will write it once complete, and what would close it.

A call's arguments are sent as `json.dumps` of the parsed object; streaming this prefix of that text
lets a client join the pieces into exactly the final string. Scanning stops for good at anything
that is not strict JSON (the final parse may then repair it) and at a repeated key (json.loads
keeps the last). Separators and keys wait for the value after them, so the prefix plus `closing`
is always valid JSON."""

from __future__ import annotations

import json
import re

from hearth.tool_parsers.lenient_json import loads

_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_WORDS = ("true", "false", "null")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


class _Stop(Exception):
    """Not strict JSON, or not yet complete: the certain prefix ends here."""


class _Scan:
    def __init__(self, text: str):
        self.text, self.i = text, 0
        self.done = ""  # certain canonical text
        self.done_at = 0  # where in `text` the certain part ends: what the model wrote after it is text[done_at:]
        self.pending = ""  # separators and keys waiting for their value
        self.stack: list[tuple[str, set]] = []  # open containers ("}" or "]", keys seen)
        self.in_string = False

    def commit(self, piece: str) -> None:
        """`piece` (with the separators and keys pending before it) is certain; the scan is past it."""
        self.done += self.pending + piece
        self.pending = ""
        self.done_at = self.i

    def ws(self) -> None:
        while self.i < len(self.text) and self.text[self.i] in " \t\r\n":
            self.i += 1

    def peek(self) -> str:
        self.ws()
        if self.i >= len(self.text):
            raise _Stop
        return self.text[self.i]

    def value(self) -> None:
        ch = self.peek()
        if ch == "{":
            self.i += 1
            self.commit("{")
            self.container("}")
        elif ch == "[":
            self.i += 1
            self.commit("[")
            self.container("]")
        elif ch == '"':
            self.i += 1
            self.commit('"')
            self.in_string = True
            self.commit(json.dumps(self.string(partial=True), ensure_ascii=False)[1:-1])
            self.in_string = False
            self.commit('"')
        else:
            self.scalar()

    def scalar(self) -> None:
        rest = self.text[self.i:]
        word = next((w for w in _WORDS if rest.startswith(w)), None)
        m = None if word else _NUMBER.match(rest)
        token = word or (m.group(0) if m else "")
        end = self.i + len(token)
        if not token or end >= len(self.text):  # a number may go on; nothing follows a word yet
            raise _Stop
        if self.text[end].isalnum() or self.text[end] in ".eE+-":
            raise _Stop
        try:  # a number a double cannot hold (1e400) is not carried: the final parse refuses it
            piece = word or json.dumps(loads(token))
        except ValueError:
            raise _Stop from None
        self.i = end
        self.commit(piece)

    def string(self, partial: bool) -> str:
        """The string's characters from after its opening quote; with `partial`, the characters
        decoded so far are committed by the caller even when the string is not closed yet."""
        chars = []
        while True:
            if self.i >= len(self.text):
                if partial:
                    self.commit(json.dumps("".join(chars), ensure_ascii=False)[1:-1])
                raise _Stop
            ch = self.text[self.i]
            if ch == '"':
                self.i += 1
                return "".join(chars)
            if ch == "\\":
                esc = self.text[self.i + 1:self.i + 2]
                if esc == "u":
                    code, size = _unicode_escape(self.text, self.i)
                    if code is None:  # cut off, or a lone surrogate: json.loads decides at the end
                        if partial:
                            self.commit(json.dumps("".join(chars), ensure_ascii=False)[1:-1])
                        raise _Stop
                    chars.append(chr(code))
                    self.i += size
                    continue
                if esc not in _ESCAPES:
                    if partial:
                        self.commit(json.dumps("".join(chars), ensure_ascii=False)[1:-1])
                    raise _Stop
                chars.append(_ESCAPES[esc])
                self.i += 2
                continue
            if ord(ch) < 0x20:  # strict JSON has no raw control characters in strings
                if partial:
                    self.commit(json.dumps("".join(chars), ensure_ascii=False)[1:-1])
                raise _Stop
            chars.append(ch)
            self.i += 1

    def container(self, closer: str) -> None:
        keys: set = set()
        self.stack.append((closer, keys))
        first = True
        while True:
            ch = self.peek()
            if ch == closer:
                self.i += 1
                self.pending = ""
                self.stack.pop()
                self.commit(closer)
                return
            if not first:
                if ch != ",":
                    raise _Stop
                self.i += 1
                self.pending = ", "
            first = False
            if closer == "}":
                if self.peek() != '"':
                    raise _Stop
                self.i += 1
                key = self.string(partial=False)
                if key in keys:
                    raise _Stop
                keys.add(key)
                if self.peek() != ":":
                    raise _Stop
                self.i += 1
                self.pending += json.dumps(key, ensure_ascii=False) + ": "
            self.value()


def _hex4(text: str, i: int) -> int | None:
    digits = text[i:i + 4]
    if len(digits) < 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
        return None
    return int(digits, 16)


def _unicode_escape(text: str, i: int) -> tuple[int | None, int]:
    """The code point of the `\\uXXXX` at `i` (a surrogate pair as one) and its length."""
    code = _hex4(text, i + 2)
    if code is None or 0xDC00 <= code < 0xE000:
        return None, 0
    if code < 0xD800 or code >= 0xE000:
        return code, 6
    low = _hex4(text, i + 8) if text[i + 6:i + 8] == "\\u" else None
    if low is None or not 0xDC00 <= low < 0xE000:
        return None, 0
    return 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00), 12


def certain_prefix(text: str) -> tuple[str, str]:
    """(the certain canonical prefix of the JSON value `text` opens with, the text that closes it
    into valid JSON)."""
    certain, closing, _ = certain_span(text)
    return certain, closing


def certain_span(text: str) -> tuple[str, str, int]:
    """certain_prefix, and where in `text` the certain prefix's source ends (text[end:] is what the
    model wrote after it)."""
    scan = _Scan(text)
    try:
        scan.value()
    except _Stop:
        pass
    closing = ('"' if scan.in_string else "") + "".join(c for c, _ in reversed(scan.stack))
    return scan.done, closing, scan.done_at
