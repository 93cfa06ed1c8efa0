"""Ctrl-C on `hearth serve` with answers streaming: they end at once with an error event (OpenAI's
`data: {"error": ...}` then [DONE]; Anthropic's `event: error`), and the server exits quietly
(before: it waited uvicorn's 5 s graceful timeout, cancelled the streams with a traceback, and the
clients' streams were cut with no error and no [DONE])."""

import json
import signal
import threading
import time

import httpx2
import pytest

from tests.server.conftest import API_KEY, launch, stop

LONG = {"model": "tiny", "max_tokens": 4000, "ignore_eos": True, "stream": True,
        "messages": [{"role": "user", "content": "count"}]}
ROUTES = {"openai": ("/v1/chat/completions", LONG),
          "anthropic": ("/v1/messages", {k: v for k, v in LONG.items() if k != "ignore_eos"})}


@pytest.fixture
def tiny(tmp_path):
    from tests.gguf_factory import write_tiny_gguf
    from tests.server.fakes import TEMPLATE

    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, "llama", chat_template=TEMPLATE, context=8192)
    return path


def _stream(url: str, route: str, started: threading.Event, lines: list[str]) -> None:
    path, body = ROUTES[route]
    headers = {"Authorization": f"Bearer {API_KEY}", "x-api-key": API_KEY, "anthropic-version": "2023-06-01"}
    with httpx2.stream("POST", url + path, json=body, headers=headers, timeout=60) as r:
        try:
            for line in r.iter_lines():
                lines.append(line)
                if sum(x.startswith("data:") for x in lines) >= 4:
                    started.set()
        except httpx2.HTTPError as e:  # a cut stream: what the test rules out
            lines.append(f"CUT {type(e).__name__}")


def test_ctrl_c_ends_streams_with_an_error_event_and_exits_quietly(tiny, tmp_path):
    log = tmp_path / "serve.log"
    proc, server = launch(tiny, log, "--max-model-len", "8192", name="tiny")
    try:
        runs = {route: (threading.Event(), []) for route in ROUTES}
        threads = [threading.Thread(target=_stream, args=(server.url, route, *runs[route])) for route in ROUTES]
        for t in threads:
            t.start()
        for started, lines in runs.values():
            assert started.wait(60), lines
        proc.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        code = proc.wait(20)
        took = time.monotonic() - t0
        for t in threads:
            t.join(20)
    finally:
        stop(proc)
    text = log.read_text()
    assert code == 130 and took < 3, (took, text)  # 130: a Ctrl-C, as uvicorn re-raises it and the shell says
    assert "Traceback" not in text and "CancelledError" not in text and "timeout graceful" not in text, text

    openai_lines = [x for x in runs["openai"][1] if x]
    assert openai_lines[-1] == "data: [DONE]", openai_lines[-3:]
    error = json.loads(openai_lines[-2].removeprefix("data: "))["error"]
    assert error["code"] == "server_shutting_down" and "shutting down" in error["message"]

    anthropic_lines = [x for x in runs["anthropic"][1] if x]
    assert anthropic_lines[-2] == "event: error", anthropic_lines[-3:]
    body = json.loads(anthropic_lines[-1].removeprefix("data: "))
    assert body["type"] == "error" and "shutting down" in body["error"]["message"]
