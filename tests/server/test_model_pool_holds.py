"""A request keeps its model loaded from the moment it chose it to its last engine request, even where none of
its engine requests is in flight (hearth.api.model_holds): between a guarded attempt and its retry, while its
images load. Each test asks for another model in a budget of one right there; it found the first idle and
unloaded it, and the request's next engine request met a shut-down engine.

The guarded one calls the app as raw ASGI (as tests/server/test_disconnect.py), its `send` the moment the server
writes a chunk of the stream, which a slow client (uvicorn waits for the socket to drain) or any other await
there gives the event loop to other requests."""

from __future__ import annotations

import asyncio
import json

import httpx

from hearth.api.app import create_app
from hearth.api.errors import APIError
from hearth.api.model_pool import ModelPool
from hearth.api.model_spec import ModelSpec
from hearth.engine.async_engine import EngineShutdownError
from hearth.sampling_params import SamplingParams
from tests.server.fakes import FakeEngine, fake_served
from tests.server.test_tool_guard import WEATHER


class UnloadableEngine(FakeEngine):
    """Refuses requests once shut down, as AsyncEngine does (a model unloaded under a request)."""

    def add_request(self, *args, **kw):
        if self.stopped:
            raise EngineShutdownError("the model was unloaded as this request reached it; send it again")
        return super().add_request(*args, **kw)


def _pool() -> ModelPool:
    specs = [ModelSpec([name], 4 << 30, max_model_len=4096) for name in ("a", "b")]
    return ModelPool(specs, lambda spec: fake_served(engine=UnloadableEngine(), names=spec.names), 4 << 30,
                     busy_wait_s=0)


async def _stream_while_b_is_asked(pool: ModelPool, body: dict) -> tuple[list[str], list]:
    """a's streamed answer, with b asked for (no wait for a busy model) at the first chunk written while a's engine
    has nothing in flight and one request added (the first attempt ended, its retry not yet queued): its stream
    lines, and what b's ask got."""
    app = create_app(pool)
    a = await pool.get("a")
    pending = [{"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}]
    chunks, asked = [], []
    forever = asyncio.Event()

    async def receive():
        if pending:
            return pending.pop(0)
        await forever.wait()

    async def send(message):
        if message["type"] == "http.response.body" and message.get("body"):
            chunks.append(message["body"].decode())
            if a.engine.num_in_flight == 0 and len(a.engine.added) == 1 and not asked:
                try:
                    asked.append(await pool.get("b"))
                except APIError as e:
                    asked.append(e)

    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"}, "http_version": "1.1",
             "method": "POST", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
             "query_string": b"", "root_path": "", "headers": [(b"content-type", b"application/json")],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80), "state": {}}
    await asyncio.wait_for(app(scope, receive, send), timeout=30)
    await pool.close()
    return [line for c in chunks for line in c.splitlines() if line.startswith("data: ")], asked


def test_a_guarded_request_between_attempts_keeps_its_model_loaded():
    """tool_choice required and a first attempt in text: the guard retries. The retry was refused by an engine
    unloaded between the two (an error event where the call should be), b having found a idle."""
    body = {"model": "a", "messages": [{"role": "user", "content": "script:guard_text"}], "tools": [WEATHER],
            "tool_choice": "required", "stream": True}
    lines, asked = asyncio.run(_stream_while_b_is_asked(_pool(), body))
    assert lines[-1] == "data: [DONE]"
    events = [json.loads(line[6:]) for line in lines[:-1]]
    assert not [e for e in events if "error" in e], events
    calls = [tc for e in events for tc in e["choices"][0]["delta"].get("tool_calls") or []]
    assert json.loads("".join(tc["function"].get("arguments") or "" for tc in calls)) == {"city": "Paris"}
    (refused,) = asked  # b waited for no one: a was serving its request
    assert isinstance(refused, APIError) and refused.status == 503 and refused.code == "model_busy"


def test_a_request_whose_images_load_keeps_its_model_loaded():
    """A request's images load in threads after it chose its model and before its engine request queues: the
    model another request needed room for was unloaded under it then, and it got a 503 "the model was unloaded
    as this request reached it"."""
    import threading

    import numpy as np

    from hearth.api.media_parts import Vision
    from hearth.media.images import PreparedImage

    preparing, go = threading.Event(), threading.Event()

    def prepare(data: bytes) -> PreparedImage:  # a slow decode, held until b has asked for room
        preparing.set()
        assert go.wait(timeout=30)
        return PreparedImage(np.zeros((1, 3, 2, 2), np.float32), 1, ("",), "", None, False, (b"d",))

    def load(spec):
        served = fake_served(engine=UnloadableEngine(), names=spec.names)
        served.vision = Vision(cfg=None, prepare=prepare)
        return served

    async def scenario():
        pool = ModelPool([ModelSpec([n], 4 << 30, max_model_len=4096) for n in ("a", "b")], load, 4 << 30,
                         busy_wait_s=0)
        app = create_app(pool)
        await pool.get("a")
        image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
        body = {"model": "a", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, image]}]}
        transport = httpx.ASGITransport(app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            answer = asyncio.ensure_future(client.post("/v1/chat/completions", json=body))
            while not preparing.is_set():
                await asyncio.sleep(0.01)
            asked = await _ask(pool, "b")
            go.set()
            r = await answer
        await pool.close()
        return r, asked

    _answered_and_b_refused(*asyncio.run(scenario()))


def test_an_embedding_request_waiting_for_room_keeps_its_model_loaded():
    """Its inputs go in waves that fit the engine's room; a full engine is waited on with none of them in flight.
    The other requests ended there, b found a idle and unloaded it, and the wave got a 503."""
    full = asyncio.Event()

    class OneSlot(UnloadableEngine):
        def add_request(self, *args, **kw):
            if len(self.live) >= self.max_in_flight:
                full.set()  # the embedding request waits for room now
            return super().add_request(*args, **kw)

    async def scenario():
        pool = ModelPool([ModelSpec([n], 4 << 30, max_model_len=4096) for n in ("a", "b")],
                         lambda spec: fake_served(engine=OneSlot(max_in_flight=1), names=spec.names), 4 << 30,
                         busy_wait_s=0)
        app = create_app(pool)
        a = await pool.get("a")
        other = a.engine.add_request([1, 2], SamplingParams(max_tokens=5), request_id="other")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as client:
            answer = asyncio.ensure_future(client.post("/v1/embeddings", json={"model": "a", "input": ["x", "y"]}))
            await asyncio.wait_for(full.wait(), 30)
            other.abort()  # the engine is free, and nothing of the embedding request is in flight
            asked = await _ask(pool, "b")
            r = await answer
        await pool.close()
        return r, asked

    _answered_and_b_refused(*asyncio.run(scenario()))


async def _ask(pool, name: str):
    """The model pool's answer for `name`: its ServedModel, or the APIError it refused with."""
    try:
        return await pool.get(name)
    except APIError as e:
        return e


def _answered_and_b_refused(r, asked) -> None:
    """The held request answered whole, and b was refused: its model was busy, not unloaded under it."""
    assert r.status_code == 200, r.text
    assert isinstance(asked, APIError) and asked.status == 503 and asked.code == "model_busy"

