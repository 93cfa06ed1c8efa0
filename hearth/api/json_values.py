"""Values Python's JSON reader takes but JSON has not (RFC 8259): NaN, Infinity, a number too large for a double
(1e400 reads as inf) and a lone UTF-16 surrogate ("\\ud800", not Unicode); and an integer of more digits than
Python reads (4300: FastAPI's answer was "There was an error parsing the body"). Each is a 400 naming the field
that holds it, on every route and in every field alike, before any route reads the body: one echoed into an
answer (a Responses body's metadata, /completion's stop, a model name in an error) made the answer's own JSON
fail to encode, a 500.

A body is read twice only when its bytes could hold one (_MAYBE): almost none do."""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hearth.api.errors import error_body
from hearth.api.guards import replay
from hearth.loader.tokenizer import lone_surrogate

_MAYBE = re.compile(rb"NaN|Infinity|\\u[dD][89a-fA-F]|\d[eE]\+?\d{3}|\d{300}")
"""What such a value's JSON text holds (a surrogate escape, an exponent of 3 digits, 300 digits in a row);
text inside a string may match too, and is then found fine."""


@dataclass(frozen=True)
class LongInt:
    """An integer literal past sys.get_int_max_str_digits(), as _check's reader leaves it."""
    digits: int


def _int(text: str) -> int | LongInt:
    try:
        return int(text)
    except ValueError:
        return LongInt(len(text.lstrip("-")))


def bad_value(data: Any) -> tuple[str, str] | None:
    """(field, why) of the first non-JSON value in parsed `data` (field: "messages[0].content"; "" the body
    itself); None where there is none. Iterative: a body may nest deep."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return where, f"must be a finite number, got {v}"
        if isinstance(v, LongInt):
            return where, f"is an integer of {v.digits} digits; this server reads at most {sys.get_int_max_str_digits()}"
        if isinstance(v, str) and (why := lone_surrogate(v)):
            return where, why
        if isinstance(v, dict):
            for k, item in reversed(v.items()):
                if why := lone_surrogate(k):
                    return where, f"a key {why}"
                stack.append((f"{where}.{k}" if where else k, item))
        elif isinstance(v, list):
            stack.extend((f"{where}[{i}]", item) for i, item in reversed(list(enumerate(v))))
    return None


def _check(body: bytes) -> tuple[str, str] | None:
    if not _MAYBE.search(body):
        return None
    try:
        data = json.loads(body, parse_int=_int)
    except (ValueError, RecursionError):  # not JSON at all: the route's reader names that
        return None
    return bad_value(data)


class JSONValuesMiddleware:
    """400 for a body holding a value JSON has not (bad_value), in the route's error shape. Sits inside
    BodyLimitMiddleware, which hands the body on as one message."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH", "DELETE"):
            return await self.app(scope, receive, send)
        messages: list[Message] = []
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
        found = _check(b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request"))
        if found is None:
            return await self.app(scope, replay(messages, receive), send)
        field, why = found
        message = f"{field}: {why}" if field else f"request body: {why}"
        body = json.dumps(error_body(scope["path"], 400, message, field or None)).encode()
        await send({"type": "http.response.start", "status": 400,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

