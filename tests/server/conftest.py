"""Two ways to reach a server:

- `fake` / `make_fake`: the app in-process around a scripted FakeEngine (tests/server/fakes.py), driven
  through Starlette's TestClient, which the openai and anthropic SDKs accept as their http client;
- `real_server`: `python -m hearth serve <SmolLM2 .gguf>` started once per session as a
  subprocess on a free loopback port, with an API key and one CORS origin;
- `qwen_client`: the app in-process around Qwen2.5-Coder-0.5B (served as "qwen", one sequence), once
  per session for the real-model tests that need a coder model's answers."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import anthropic
import httpx2
import openai
import pytest
from starlette.testclient import TestClient

from tests.server.fakes import TEMPLATE, FakeEngine, fake_app

API_KEY = "test-key-123"
CORS_ORIGIN = "http://allowed.example"
REPO = Path(__file__).resolve().parents[2]
# generous: a shared 2-core CI machine under load can take seconds per decode step
TIMEOUT = 300


@pytest.fixture(scope="session")
def qwen_client(model_path):
    from hearth.api.app import create_app
    from hearth.api.served import ServedModel
    from hearth.engine.async_engine import AsyncEngine
    from hearth.llm import LLM

    llm = LLM(str(model_path("qwen2.5-coder-0.5b")), progress=False, max_model_len=1024, max_num_seqs=1,
              kv_cache_memory_gb=0.05)
    with TestClient(create_app(ServedModel.from_llm(llm, ["qwen"], AsyncEngine(llm.engine)))) as c:
        yield c


@dataclass
class Fake:
    client: TestClient
    engine: FakeEngine
    openai: openai.OpenAI
    anthropic: anthropic.Anthropic

    @property
    def last(self):
        return self.engine.added[-1]


@pytest.fixture
def make_fake():
    clients = []

    def make(template: str = TEMPLATE, engine: FakeEngine | None = None, names=("fake-model",), **config) -> Fake:
        app, engine = fake_app(template, engine, names, **config)
        client = TestClient(app, raise_server_exceptions=False)
        client.__enter__()
        clients.append(client)
        key = config.get("api_key") or "unused"
        return Fake(client, engine,
                    openai.OpenAI(base_url="http://testserver/v1", api_key=key, http_client=client, max_retries=0),
                    anthropic.Anthropic(base_url="http://testserver", api_key=key, http_client=client, max_retries=0))

    yield make
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def fake(make_fake) -> Fake:
    return make_fake()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RealServer:
    url: str
    model: str
    log: Path

    def openai(self, **kw) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=API_KEY, max_retries=0, timeout=TIMEOUT, **kw)

    def anthropic(self) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=self.url, api_key=API_KEY, max_retries=0, timeout=TIMEOUT)

    def http(self) -> httpx2.Client:
        return httpx2.Client(base_url=self.url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=TIMEOUT)


def launch(path: Path | None, log: Path, *args: str, name: str | None = "smollm2") -> tuple[subprocess.Popen, RealServer]:
    """`hearth serve PATH` on a free port with the test API key, ready to take requests; `name`: its
    --served-model-name (None: none; `path` None: the models are in `args`, e.g. --models FILE)."""
    port = _free_port()
    cmd = [sys.executable, "-m", "hearth", "serve", *([str(path)] if path else []), "--port", str(port),
           "--api-key", API_KEY, *(["--served-model-name", name] if name else []), "--log-level", "warning", *args]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    server = RealServer(f"http://127.0.0.1:{port}", name or "", log)
    try:
        wait_ready(server.url, proc, server.log)
    except BaseException:
        stop(proc)
        raise
    return proc, server


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def real_server(model_path, tmp_path_factory):
    log = tmp_path_factory.mktemp("server") / "server.log"
    proc, server = launch(model_path("smollm2-135m"), log, "--cors-origins", CORS_ORIGIN, "--max-model-len", "512",
                          "--max-num-seqs", "16")
    try:
        yield server
    finally:
        stop(proc)


def wait_ready(url: str, proc: subprocess.Popen, log: Path, timeout: float = 120, what: str = "hearth serve") -> None:
    """Until `url`/health answers 200; the process's log in the failure when it exits or times out."""
    deadline = time.monotonic() + timeout
    with httpx2.Client(timeout=1) as client:  # one client: each new one builds an SSL context, ~40 ms of CPU a poll
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"{what} exited with {proc.returncode}:\n{log.read_text()}")
            try:
                if client.get(f"{url}/health").status_code == 200:
                    return
            except httpx2.HTTPError:
                pass
            time.sleep(0.2)
    pytest.fail(f"{what} was not ready in {timeout}s:\n{log.read_text()}")
