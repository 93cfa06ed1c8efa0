"""ASGI middleware that guards every route: the API key, the request body size, a client that stalls.

Plain ASGI (not BaseHTTPMiddleware) so streaming responses and disconnect messages pass untouched."""

from __future__ import annotations

import asyncio
import hmac
import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hearth.api.errors import STALLED, error_body

PUBLIC_PATHS = frozenset({"/health", "/v1/health", "/", "/index.html", "/favicon.ico"})
PUBLIC_PREFIXES = ("/static/",)  # the chat page's assets: the page asks for the key, so they cannot need it


async def _send_error(scope: Scope, send: Send, status: int, message: str, headers: list | None = None) -> None:
    body = json.dumps(error_body(scope["path"], status, message)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


def _public(path: str) -> bool:
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


class APIKeyMiddleware:
    """`Authorization: Bearer KEY` or `x-api-key: KEY` (Anthropic's header), compared in constant time."""

    def __init__(self, app: ASGIApp, keys: list[str]):
        self.app, self.keys = app, [k.encode() for k in keys]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _public(scope["path"]) or scope["method"] == "OPTIONS":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        given = headers.get(b"x-api-key", b"")
        auth = headers.get(b"authorization")
        bearer = auth is not None and auth[:7].lower() == b"bearer "
        if bearer:
            given = auth[7:].strip()
        if not any([hmac.compare_digest(given, key) for key in self.keys]):  # a list: every key compared
            return await _send_error(scope, send, 401, _why_refused(given, auth is not None and not bearer),
                                     [(b"www-authenticate", b"Bearer")])
        await self.app(scope, receive, send)


def _why_refused(given: bytes, malformed: bool) -> str:
    """The 401's words: a key that did not match, an Authorization header without its scheme (`Authorization:
    sk-local` was "missing API key", which sent its user looking for a header that was there), or none."""
    if given:
        return "invalid API key"
    if malformed:
        return ("malformed Authorization header: it must be 'Authorization: Bearer KEY' (the word Bearer, a space, "
                "then the key), or send the key as 'x-api-key: KEY'")
    return "missing API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'"


class BodyLimitMiddleware:
    """413 for a body over `max_bytes`, by Content-Length up front or by counting as it arrives
    (a body is buffered before the app sees it; FastAPI reads it whole anyway)."""

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            return await _send_error(scope, send, 413, self._why(int(length)))
        body, more = [], True
        size = 0
        while more:  # read the body here, so an oversized one never reaches the app
            message = await receive()
            if message["type"] != "http.request":
                return await self.app(scope, replay([message], receive), send)
            body.append(message.get("body", b""))
            size += len(body[-1])
            more = message.get("more_body", False)
            if size > self.max_bytes:
                return await _send_error(scope, send, 413, self._why(size))
        whole = {"type": "http.request", "body": b"".join(body), "more_body": False}
        await self.app(scope, replay([whole], receive), send)

    def _why(self, size: int) -> str:
        return (f"request body is {size} bytes or more; this server takes at most {self.max_bytes} "
                "(hearth serve --max-body-mb)")


def replay(messages: list[Message], receive: Receive) -> Receive:
    async def replay() -> Message:
        return messages.pop(0) if messages else await receive()
    return replay


class StallTimeoutMiddleware:
    """llama-server's --timeout (its HTTP library's read and write timeouts): a client that sends none of its request
    body, or reads none of the answer, for `seconds` is dropped as one that disconnected: its request is aborted
    and its KV blocks freed, where it would hold a slot for as long as it stalls."""

    def __init__(self, app: ASGIApp, seconds: float):
        self.app, self.seconds = app, seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        body_read = False
        stall: dict = {}  # shared by the scopes the inner middlewares copy: the error handler reads it
        scope = {**scope, STALLED: stall}

        async def timed_receive() -> Message:
            nonlocal body_read
            if body_read:  # past the body, receive() waits for a disconnect the whole answer long
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), self.seconds)
            except asyncio.TimeoutError:  # the body's read fails on it: a 408 (hearth.api.errors), if anyone hears
                stall["seconds"] = self.seconds
                return {"type": "http.disconnect"}
            body_read = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        async def timed_send(message: Message) -> None:
            try:
                await asyncio.wait_for(send(message), self.seconds)
            except asyncio.TimeoutError:  # what a write to a gone client raises: the routes end their stream on it
                raise OSError(f"the client read nothing for {self.seconds:g} s (--timeout)") from None

        await self.app(scope, timed_receive, timed_send)
