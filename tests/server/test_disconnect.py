"""A client that goes away aborts its engine requests, streamed or not: the app is called as raw
ASGI with a `receive` that reports http.disconnect, around a fake engine whose `script:slow`
request never ends on its own. (tests/server/test_real_server.py checks the KV blocks.)"""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.server.fakes import fake_app


async def _call(path: str, body: dict, disconnect_after_chunks: int | None, disconnect_after_s: float | None):
    app, engine = fake_app()
    pending = [{"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}]
    gone = asyncio.Event()
    sent: list[dict] = []

    async def receive():
        if pending:
            return pending.pop(0)
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)
        chunks = sum(1 for m in sent if m["type"] == "http.response.body" and m.get("body"))
        if disconnect_after_chunks is not None and chunks >= disconnect_after_chunks:
            gone.set()

    if disconnect_after_s is not None:
        asyncio.get_running_loop().call_later(disconnect_after_s, gone.set)
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
             "root_path": "", "headers": [(b"content-type", b"application/json"), (b"host", b"test")],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80), "state": {}}
    await asyncio.wait_for(app(scope, receive, send), timeout=10)
    return engine, sent


SLOW_CHAT = {"messages": [{"role": "user", "content": "script:slow"}]}
SLOW_MESSAGES = {"max_tokens": 100, **SLOW_CHAT}


@pytest.mark.parametrize("path,body", [("/v1/chat/completions", SLOW_CHAT), ("/v1/messages", SLOW_MESSAGES),
                                       ("/v1/completions", {"prompt": "script:slow"})])
def test_stream_disconnect_aborts(path, body):
    engine, sent = asyncio.run(_call(path, {**body, "stream": True, "n": 1}, disconnect_after_chunks=3,
                                     disconnect_after_s=None))
    assert engine.aborted and not engine.live
    assert sent[0]["status"] == 200


@pytest.mark.parametrize("path,body", [("/v1/chat/completions", {**SLOW_CHAT, "n": 2}),
                                       ("/v1/messages", SLOW_MESSAGES)])
def test_whole_answer_disconnect_aborts(path, body):
    engine, _ = asyncio.run(_call(path, body, disconnect_after_chunks=None, disconnect_after_s=0.2))
    assert len(engine.aborted) == body.get("n", 1) and not engine.live
