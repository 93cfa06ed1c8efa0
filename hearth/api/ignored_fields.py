"""Top-level request fields no hearth request model knows: ignored, as vLLM ignores them (clients send
vendor extras, and rejecting them, as OpenAI does, would break those clients), but never silently.
The response names them in `x-hearth-ignored-fields` (comma-separated), and the server logs each
(route, field) once, with the known field a near miss was probably meant to be (`max_token`).

A request model notes the names while FastAPI validates the body (`note`); the middleware holds
the request's set in a context variable and adds the header as the response starts, so whole and
streamed answers (and error bodies) carry it alike."""

from __future__ import annotations

import difflib
import logging
from contextvars import ContextVar
from urllib.parse import quote

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("hearth.api")

HEADER = "x-hearth-ignored-fields"
_MAX_NAMES = 32
"""Names in one header; past them `+N more` (a body of thousands of keys must not make a huge header)."""
_MAX_LOGGED = 1024
"""(route, field) pairs remembered for log-once; a client inventing names cannot grow it forever."""

# the current request's unknown names -> the names its model knows (for the near-miss hint)
_current: ContextVar[dict[str, frozenset[str]] | None] = ContextVar("hearth_ignored_fields", default=None)


def note(data: dict, known: frozenset[str]) -> None:
    """Called by a request model's validator with its raw body; outside a request (a model built
    in code) it does nothing."""
    found = _current.get()
    if found is None:
        return
    for name in data:
        if name not in known:
            found.setdefault(str(name), known)


def near_miss(name: str, known: frozenset[str]) -> str | None:
    """The known field a misspelling was probably meant to be (max_token -> max_tokens); 0.8 keeps
    unrelated short names apart (store vs stop)."""
    match = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
    return match[0] if match else None


def header_value(names: list[str]) -> str:
    """Names percent-encoded where not plain ASCII identifiers, so any key is a valid header value; an index's
    brackets stay (`samplers[1]`: visible ASCII, no separator)."""
    shown = [quote(n, safe="[]") for n in names[:_MAX_NAMES]]
    if len(names) > _MAX_NAMES:
        shown.append(f"+{len(names) - _MAX_NAMES} more")
    return ",".join(shown)


class IgnoredFieldsMiddleware:
    """Plain ASGI (streamed responses pass untouched): one set of names per request."""

    def __init__(self, app: ASGIApp):
        self.app = app
        self.logged: set[tuple[str, str]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        found: dict[str, frozenset[str]] = {}
        token = _current.set(found)

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start" and found:
                self._log(scope["path"], found)
                header = (HEADER.encode(), header_value(list(found)).encode("ascii"))
                message = {**message, "headers": [*message.get("headers", []), header]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_header)
        finally:
            _current.reset(token)

    def _log(self, path: str, found: dict[str, frozenset[str]]) -> None:
        for name, known in found.items():
            if (path, name) in self.logged or len(self.logged) >= _MAX_LOGGED:
                continue
            self.logged.add((path, name))
            hint = near_miss(name, known)
            log.warning("%s: ignored unknown field %r%s (logged once per route and field; the response names it "
                        "in %s)", path, name, f", did you mean {hint!r}?" if hint else "", HEADER)
