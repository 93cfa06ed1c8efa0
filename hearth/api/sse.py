"""Server-sent events: the two wire spellings, and a response that notices a client going away.

Starlette's StreamingResponse (ASGI spec 2.4) only learns of a disconnect when a write fails, which
can be a long prefill away; this one also listens for `http.disconnect` and then cancels the
stream, and it always calls `on_close` so the engine requests behind it are aborted."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

DONE = "data: [DONE]\n\n"
_LINE_BREAKS = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"})
"""Characters str.splitlines ends a line at that JSON leaves raw in a string; httpx's iter_lines splits so, and
with it the `ollama` client's NDJSON reader and many SSE readers: a model that wrote one broke the line mid-JSON."""


def one_line_json(payload: dict) -> str:
    """`payload` as JSON on one line however a reader splits lines (the same value to any JSON parser)."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).translate(_LINE_BREAKS)


def data_event(payload: dict) -> str:
    """OpenAI: `data: {...}`."""
    return f"data: {one_line_json(payload)}\n\n"


def named_event(event: str, payload: dict) -> str:
    """Anthropic: `event: type` then `data: {...}`."""
    return f"event: {event}\ndata: {one_line_json(payload)}\n\n"


class SSEResponse(StreamingResponse):
    def __init__(self, events: AsyncIterator[str], on_close: Callable[[], None] | None = None,
                 media_type: str = "text/event-stream", then: Callable[[], Awaitable] | None = None):
        """media_type: Ollama's streams are NDJSON (application/x-ndjson), one JSON object a line. then: awaited
        once the stream has ended, its request closed (Ollama's keep_alive 0 unloads the model there)."""
        super().__init__(events, media_type=media_type,
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self.on_close, self.then = on_close, then

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as tg:
                async def stream() -> None:
                    try:
                        await self.stream_response(send)
                    except OSError:  # the client went away mid-write
                        pass
                    tg.cancel_scope.cancel()

                async def watch() -> None:
                    await self.listen_for_disconnect(receive)
                    tg.cancel_scope.cancel()

                tg.start_soon(stream)
                tg.start_soon(watch)
        finally:
            await _close(self.body_iterator)
            if self.on_close is not None:
                self.on_close()
            if self.then is not None:
                with anyio.CancelScope(shield=True):
                    await self.then()


async def _close(iterator) -> None:
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        with anyio.CancelScope(shield=True):
            await aclose()
