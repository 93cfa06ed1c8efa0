"""llama-server's and vLLM's serve flags that hearth gives a behaviour of its own: --api-key-file, --ssl-keyfile /
--ssl-key-file and --ssl-certfile / --ssl-cert-file, --root-path, --timeout (-to), --pooling, --embedding,
--disable-uvicorn-access-log, --disable-fastapi-docs, -b/--batch-size. The flags hearth takes because it behaves
so already, and those it answers with its own way, are tests/test_cli.py's."""

from __future__ import annotations

import asyncio
import time

import pytest
from starlette.testclient import TestClient

from hearth.api.app import ServerConfig, create_app
from hearth.api.guards import StallTimeoutMiddleware
from hearth.api.sse import SSEResponse
from hearth.cli import command_parser
from hearth.commands.listen_flags import uvicorn_options
from hearth.commands.serve import server_config
from hearth.errors import HearthError
from tests.gguf_factory import write_tiny_gguf
from tests.server.fakes import fake_served
from tests.test_bad_input import assert_one_line_error, run_cli

USER = [{"role": "user", "content": "script:hello"}]


def serve_args(*argv: str):
    return command_parser("serve").parse_intermixed_args(["m", *argv])


def test_api_key_file_adds_keys_as_llama_server_reads_them(tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("# the team's keys\nsk-one\n\nsk-two\n")
    config = server_config(serve_args("--api-key", "sk-flag", "--api-key-file", str(keys)))
    with TestClient(create_app(fake_served(), config)) as client:
        for key in ("sk-flag", "sk-one", "sk-two"):
            r = client.get("/v1/models", headers={"Authorization": f"Bearer {key}"})
            assert r.status_code == 200, key
        for key in ("sk-three", "# the team's keys", ""):
            assert client.get("/v1/models", headers={"x-api-key": key}).status_code == 401
    only_file = server_config(serve_args("--api-key-file", str(keys)))
    with TestClient(create_app(fake_served(), only_file)) as client:
        assert client.get("/v1/models").status_code == 401
        assert client.get("/v1/models", headers={"x-api-key": "sk-two"}).status_code == 200


def test_a_bad_api_key_file_is_one_line(capsys, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("# none yet\n\n")
    for path, says in ((tmp_path / "missing.txt", "cannot read it"), (empty, "has no key (one a line)")):
        assert_one_line_error(*run_cli(capsys, "serve", "m.gguf", "--api-key-file", str(path)),
                              f"--api-key-file {path}: {says}")


def test_ssl_root_path_and_access_log_reach_uvicorn(tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    key.write_text("k")
    cert.write_text("c")
    for flags in (("--ssl-keyfile", "--ssl-certfile"), ("--ssl-key-file", "--ssl-cert-file")):  # vLLM's, llama-server's
        options = uvicorn_options(serve_args(flags[0], str(key), flags[1], str(cert), "--root-path", "/llm",
                                             "--disable-uvicorn-access-log"))
        assert options == {"ssl_keyfile": str(key), "ssl_certfile": str(cert), "root_path": "/llm", "access_log": False}
    assert uvicorn_options(serve_args()) == {"root_path": "", "access_log": True}
    with pytest.raises(HearthError, match="--ssl-keyfile needs --ssl-certfile too"):
        uvicorn_options(serve_args("--ssl-keyfile", str(key)))
    with pytest.raises(HearthError, match="--ssl-certfile .*nope.pem: no such file"):
        uvicorn_options(serve_args("--ssl-keyfile", str(key), "--ssl-certfile", str(tmp_path / "nope.pem")))


def test_the_server_runs_uvicorn_with_them(tmp_path, monkeypatch, capsys):
    """run_server hands the options to uvicorn and announces the https URL under the root path."""
    import hearth.commands.serve as serve

    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    key.write_text("k")
    cert.write_text("c")
    seen = {}

    def run(self):
        seen.update(vars(self.config))
        self.started = True
        print(self.ready(self.bound_port()), flush=True)

    monkeypatch.setattr(serve._Server, "run", run)
    args = serve_args("--ssl-keyfile", str(key), "--ssl-certfile", str(cert), "--root-path", "/llm", "--port", "8443")
    assert serve.run_server(create_app(fake_served()), args, "'m'") == 0
    assert (seen["ssl_keyfile"], seen["ssl_certfile"], seen["root_path"]) == (str(key), str(cert), "/llm")
    assert "at https://127.0.0.1:8443/llm (chat page" in capsys.readouterr().out


def test_disable_fastapi_docs_drops_the_openapi_schema():
    with TestClient(create_app(fake_served())) as client:
        assert client.get("/openapi.json").status_code == 200
    config = server_config(serve_args("--disable-fastapi-docs"))
    with TestClient(create_app(fake_served(), config)) as client:
        assert client.get("/openapi.json").status_code == 404


def test_embedding_mode_refuses_the_generating_routes_in_their_own_shape():
    """llama-server's --embedding: 501 "This server does not support completions" there; hearth's names the flag."""
    config = server_config(serve_args("--embeddings"))
    with TestClient(create_app(fake_served(), config), raise_server_exceptions=False) as client:
        r = client.post("/v1/chat/completions", json={"messages": USER})
        assert r.status_code == 501 and r.headers["x-should-retry"] == "false"
        assert r.json()["error"]["type"] == "not_supported_error" and "--embedding" in r.json()["error"]["message"]
        r = client.post("/v1/messages", json={"model": "m", "max_tokens": 5, "messages": USER})
        assert r.status_code == 501 and r.json()["type"] == "error"
        r = client.post("/api/chat", json={"model": "fake-model", "messages": USER})
        assert r.status_code == 501 and "only embeds" in r.json()["error"]
        for path, body in (("/v1/completions", {"prompt": "hi"}), ("/v1/responses", {"input": "hi"}),
                           ("/api/generate", {"prompt": "hi"}), ("/infill", {"input_prefix": "a"}),
                           ("/completion", {"prompt": "hi"})):
            assert client.post(path, json=body).status_code == 501, path
        assert client.get("/v1/models").status_code == 200
        assert client.get("/").status_code == 200 and "text/plain" in client.get("/").headers["content-type"]
        for path, body in (("/api/generate", {}), ("/api/chat", {"messages": []})):  # Ollama's preload and stop
            for keep_alive in ("5m", 0):
                r = client.post(path, json={"model": "fake-model", "keep_alive": keep_alive, **body})
                if keep_alive == 0:  # a stop: this in-process server's model cannot load again, so it stays (409)
                    assert r.status_code == 409 and "was not unloaded" in r.json()["error"], (path, r.text)
                else:
                    assert r.status_code == 200 and r.json()["done_reason"] == "load", (path, keep_alive)
    with TestClient(create_app(fake_served())) as client:  # without it: chat answers
        assert client.post("/v1/chat/completions", json={"messages": USER}).status_code == 200


def test_pooling_sets_how_a_decoder_s_embeddings_pool(tmp_path):
    from hearth.commands.serve_models import build_pool
    from hearth.llm import LLM

    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, "llama")
    pool = build_pool(command_parser("serve").parse_intermixed_args([str(path), "--pooling", "mean"]))
    pool.preload()
    with TestClient(create_app(pool)) as client:
        got = client.post("/v1/embeddings", json={"input": "hello world"}).json()["data"][0]["embedding"]
        assert pool.slots[0].served.pooling == "mean"
    llm = LLM(str(path))
    mean, last = (llm.embed(["hello world"], pooling=p)[0].outputs.embedding for p in ("mean", "last"))
    assert got == pytest.approx(mean, abs=1e-5) and got != pytest.approx(last, abs=1e-5)


def test_pooling_cls_on_a_decoder_is_one_line(capsys, tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, "llama")
    assert_one_line_error(*run_cli(capsys, "serve", str(path), "--pooling", "cls"),
                          "--pooling cls: MODEL", "is a decoder, whose first token has read nothing else")


def test_llama_server_s_batch_size_is_the_step_budget():
    for flag in ("-b", "--batch-size", "--max-num-batched-tokens"):
        assert serve_args(flag, "512").max_num_batched_tokens == 512


async def _app_reading_body(scope, receive, send):
    message = await receive()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": message["type"].encode()})


def test_timeout_drops_a_client_that_sends_nothing():
    sent = []

    async def never():
        await asyncio.sleep(60)

    async def send(message):
        sent.append(message)

    async def scenario():
        t0 = time.perf_counter()
        await StallTimeoutMiddleware(_app_reading_body, 0.1)({"type": "http"}, never, send)
        return time.perf_counter() - t0

    assert asyncio.run(scenario()) < 5 and sent[-1]["body"] == b"http.disconnect"


def test_timeout_leaves_a_read_body_s_disconnect_watch_alone():
    """After the body, receive() waits for a disconnect the whole answer long: never timed."""
    messages = [{"type": "http.request", "body": b"{}", "more_body": False}]

    async def receive():
        if messages:
            return messages.pop()
        await asyncio.sleep(0.3)
        return {"type": "http.disconnect"}

    async def app(scope, receive, send):
        await receive()
        t0 = time.perf_counter()
        assert (await receive())["type"] == "http.disconnect" and time.perf_counter() - t0 >= 0.25

    asyncio.run(StallTimeoutMiddleware(app, 0.1)({"type": "http"}, receive, _noop))


async def _noop(message):
    return None


def test_timeout_ends_a_stream_its_client_stopped_reading_and_aborts_its_request():
    closed = []
    messages = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive():
        if messages:
            return messages.pop()
        await asyncio.sleep(60)

    async def events():
        while True:
            yield "data: {}\n\n"
            await asyncio.sleep(0)

    async def send(message):
        if message["type"] == "http.response.body":  # the client reads the head, then nothing
            await asyncio.sleep(60)

    async def scenario():
        response = SSEResponse(events(), on_close=lambda: closed.append(True))
        t0 = time.perf_counter()
        await StallTimeoutMiddleware(response, 0.1)({"type": "http", "asgi": {"spec_version": "2.4"}}, receive, send)
        return time.perf_counter() - t0

    assert asyncio.run(scenario()) < 5 and closed == [True]


def test_a_negative_timeout_is_one_line(capsys):
    assert_one_line_error(*run_cli(capsys, "serve", "m.gguf", "--timeout", "-1"), "--timeout must be 0 or more")


def test_https_with_a_self_signed_certificate(tmp_path):
    """The options make uvicorn speak TLS: /health answers over https with the certificate given."""
    import shutil
    import socket
    import subprocess
    import threading

    import httpx
    import uvicorn

    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make a certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"], check=True,
                   capture_output=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    options = uvicorn_options(serve_args("--ssl-keyfile", str(key), "--ssl-certfile", str(cert)))
    server = uvicorn.Server(uvicorn.Config(create_app(fake_served()), host="127.0.0.1", port=port, log_level="error",
                                           **options))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in range(200):
            if server.started:
                break
            time.sleep(0.02)
        r = httpx.get(f"https://127.0.0.1:{port}/health", verify=str(cert), timeout=10)
        assert r.status_code == 200 and r.json() == {"status": "ok"}
        with pytest.raises(httpx.HTTPError):  # plain http is no longer spoken there
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_api_key_takes_llama_servers_comma_separated_keys():
    """`--api-key k1,k2` was one literal key "k1,k2"."""
    with TestClient(create_app(fake_served(), server_config(serve_args("--api-key", "k1, k2")))) as client:
        for key, status in (("k1", 200), ("k2", 200), ("k1,k2", 401), ("k1, k2", 401)):
            assert client.get("/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code == status, key


def test_the_banner_names_a_chat_page_only_where_one_is_served(monkeypatch, capsys):
    """--no-webui and --embedding still announced "chat page .../", where / answers "hearth is running"."""
    import hearth.commands.serve as serve
    from hearth.api.app import ServerConfig

    monkeypatch.setattr(serve._Server, "run", lambda self: (setattr(self, "started", True), print(self.ready(self.bound_port()))))
    for config, page in ((ServerConfig(), True), (ServerConfig(webui=False), False)):
        assert serve.run_server(create_app(fake_served(), config), serve_args("--port", "8081"), "'m'") == 0
        assert ("(chat page http://127.0.0.1:8081/, API" in capsys.readouterr().out) == page


def test_a_body_that_stalls_past_timeout_is_a_408_naming_it():
    """A client that stops mid-body for --timeout: a 408 saying so (was FastAPI's "400 There was an error parsing
    the body")."""
    import json

    from tests.server.fakes import fake_app

    app, _ = fake_app(timeout_s=0.2)
    parts, sent = [{"type": "http.request", "body": b'{"model": "fake-model", "mess', "more_body": True}], []

    async def receive():
        if parts:
            return parts.pop()
        await asyncio.sleep(60)

    async def send(message):
        sent.append(message)

    path = "/v1/chat/completions"
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
             "root_path": "", "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    asyncio.run(asyncio.wait_for(app(scope, receive, send), 10))
    assert sent[0]["status"] == 408
    error = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))["error"]
    assert error["message"].startswith("the client sent none of its request body for 0.2 s (the server's --timeout)")
    assert error["code"] == "timeout"


def test_a_body_nested_too_deep_is_a_400_saying_so(fake):
    r = fake.client.post("/v1/chat/completions", content="[" * 100000, headers={"content-type": "application/json"})
    assert r.status_code == 400 and "nests arrays or objects too deep" in r.json()["error"]["message"], r.text
