"""A shutdown ends the requests still waiting for their model to load, as it ends those its engines hold
(ModelPool.end_streams): each gets the route's 503 `server_shutting_down` (no stream has begun: its headers are not
sent), and no load starts after it. Before: end_streams reached only loaded engines, and a request waiting on a
load waited out the load (or hung with it)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest
from starlette.testclient import TestClient

from hearth.api.app import create_app
from hearth.engine.async_engine import EngineShutdownError
from tests.server.test_model_pool import USER, _until, pool_of, serve  # noqa: F401  (serve: the fixture)

WAITING = [  # (path, body, the 503's body)
    ("/v1/chat/completions", {"messages": USER},
     {"error": {"message": "the server is shutting down", "type": "server_error", "param": None,
                "code": "server_shutting_down"}}),
    ("/v1/chat/completions", {"messages": USER, "stream": True},
     {"error": {"message": "the server is shutting down", "type": "server_error", "param": None,
                "code": "server_shutting_down"}}),
    ("/v1/messages", {"messages": USER, "max_tokens": 8, "stream": True},
     {"type": "error", "error": {"type": "overloaded_error", "message": "the server is shutting down"}}),
    ("/api/chat", {"messages": USER}, {"error": "the server is shutting down"}),
]


def test_shutdown_ends_the_requests_waiting_for_a_load(serve):
    pool, loader = pool_of(("a", 1), ("slow", 1))
    client = serve(pool)
    gate = loader.hold("slow")
    with ThreadPoolExecutor(len(WAITING)) as ex:
        waiting = [ex.submit(client.post, path, json={**body, "model": "slow"}) for path, body, _ in WAITING]
        assert loader.started["slow"].wait(timeout=60)
        assert not any(f.done() for f in waiting)
        client.portal.call(pool.end_streams)  # what `hearth serve`'s Ctrl-C does first, on the server's loop
        answers = [f.result(timeout=60) for f in waiting]  # the bound only catches a hang: the load still runs
        assert not gate.is_set()
        for r, (path, _, error) in zip(answers, WAITING):
            assert (path, r.status_code, r.json()) == (path, 503, error)
        gate.set()
    assert client.post("/v1/chat/completions", json={"model": "a", "messages": USER}).status_code == 503
    assert loader.loads == ["slow"]  # a request after the shutdown began loads nothing


def test_close_waits_for_a_load_under_way_and_shuts_its_engine_down():
    """A load cannot be stopped in its thread: the server's close waits for it, then shuts down what it loaded
    (before, the engine it started outlived the pool)."""
    pool, loader = pool_of(("a", 1), ("slow", 1))
    gate = loader.hold("slow")
    with TestClient(create_app(pool), raise_server_exceptions=False) as client, ThreadPoolExecutor(1) as ex:
        waiting = ex.submit(client.post, "/v1/chat/completions", json={"model": "slow", "messages": USER})
        assert loader.started["slow"].wait(timeout=60)
        client.portal.call(pool.end_streams)
        assert waiting.result(timeout=60).status_code == 503
        gate.set()
    # the lifespan's close has run
    assert loader.engine("slow").started and loader.engine("slow").stopped
    assert pool.loaded() == []


def test_a_load_waiting_for_room_loads_nothing_once_the_shutdown_began():
    """A request whose model waits for a busy model's room (busy_wait_s) ends at the shutdown, and its load stops
    waiting there without loading the model or unloading the other."""
    async def scenario():
        pool, loader = pool_of(("a", 1), ("b", 1), budget_gib=1, busy_wait_s=3600)
        await pool.start()
        async with pool.lease("a"):  # a is busy: b waits for its room
            get = asyncio.ensure_future(pool.get("b"))
            await _until(lambda: pool.slots[1].loading is not None)
            load = pool.slots[1].loading
            pool.end_streams()
            with pytest.raises(EngineShutdownError):  # the bound only catches a hang (before: busy_wait_s)
                await asyncio.wait_for(get, 60)
            with pytest.raises(EngineShutdownError):
                await asyncio.wait_for(load, 60)
        assert loader.loads == ["a"] and [s.served is not None for s in pool.slots] == [True, False]
        await pool.close()

    asyncio.run(scenario())
