"""The model under test behind a real hearth server in this process: the FastAPI app on a free
loopback port, uvicorn on its own thread, so the eval's client speaks HTTP to it exactly as any
OpenAI client would (the same request parsing, tool parsing and errors); or a server already
running elsewhere (RemoteServer: `hearth eval tools --url`)."""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse

import uvicorn

from hearth.api.app import create_app
from hearth.api.model_pool import ModelPool
from hearth.api.served import ServedModel
from hearth.engine.async_engine import AsyncEngine
from hearth.errors import HearthError
from hearth.tool_guard.routing import TOOL_FLOOR, RouterConfig

NAME = "model-under-test"
ROUTER_NAME = "router-under-test"
TIMEOUT = 900.0
"""Seconds one request may take (a long multi-turn prompt on a slow CPU)."""


class InProcessServer:
    def __init__(self, llm, router_llm=None, router_threshold: float = 0.0, router_tool_floor: float = TOOL_FLOOR):
        """router_llm: a small model that routes the model's tool calls (hearth.api.tool_router) at this
        threshold and tool floor; at 0 and 0 (off) every valid call is kept: the rows a --sweep reads."""
        served = [ServedModel.from_llm(llm, [NAME], AsyncEngine(llm.engine))]
        routers = {}
        if router_llm is not None:
            served.append(ServedModel.from_llm(router_llm, [ROUTER_NAME], AsyncEngine(router_llm.engine)))
            routers[NAME] = RouterConfig(ROUTER_NAME, router_threshold, router_tool_floor)
        app = create_app(ModelPool.of(served, routers))
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True, name="eval-server")
        self.port = 0

    def __enter__(self) -> InProcessServer:
        self._thread.start()
        deadline = time.monotonic() + 60
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise HearthError("the in-process server did not start")
            time.sleep(0.02)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)

    def post(self, body: dict) -> tuple[int, dict]:
        """POST /v1/chat/completions; (status, JSON body)."""
        return post_chat("127.0.0.1", self.port, "", {"model": NAME, **body})


class RemoteServer:
    """An OpenAI-compatible server already running (another hearth, `llama-server --jinja`): the same
    client loop against its /v1/chat/completions. `model` is the name sent with each request."""

    def __init__(self, url: str, model: str):
        u = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
        try:
            port = u.port or 80
        except ValueError:  # a port that is no number
            port = None
        if u.scheme != "http" or not u.hostname or port is None:
            raise HearthError(f"--url {url!r}: give http://HOST:PORT of an OpenAI-compatible server")
        self.host, self.port, self.model = u.hostname, port, model
        self.base = u.path.rstrip("/").removesuffix("/v1")

    def __enter__(self) -> RemoteServer:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def post(self, body: dict) -> tuple[int, dict]:
        return post_chat(self.host, self.port, self.base, {"model": self.model, **body})


def post_chat(host: str, port: int, base: str, body: dict) -> tuple[int, dict]:
    """POST {base}/v1/chat/completions; (status, JSON body). An unreachable server is a HearthError."""
    conn = http.client.HTTPConnection(host, port, timeout=TIMEOUT)
    try:
        conn.request("POST", f"{base}/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
    except (OSError, http.client.HTTPException) as e:  # refused, or not speaking HTTP
        raise HearthError(f"cannot reach the server at {host}:{port}: {e!r}") from None
    finally:
        conn.close()
    try:
        return resp.status, json.loads(data)
    except ValueError:
        return resp.status, {"error": {"message": data.decode("utf-8", "replace")[:500]}}
