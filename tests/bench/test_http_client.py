"""The --url client against a fake OpenAI-compatible server: what it sends, what it times, what it
parses, and how it fails."""

from __future__ import annotations

import socket

import pytest

from hearth.bench import BenchError
from hearth.bench.harness import run_workload
from hearth.bench.http_client import HttpClient, api_base
from hearth.bench.sse import parse_chunk, sse_events
from hearth.bench.workloads import build_workload
from tests.bench.fake_openai import FakeServer, Script, stream_of

FIRST, GAP = 0.3, 0.1


@pytest.fixture
def server():
    with FakeServer() as s:
        yield s


def _run(client, requests=2, concurrency=2, max_tokens=5, warmup=0):
    w = build_workload("chat", seed=0, requests=requests, concurrency=concurrency, max_tokens=max_tokens)
    return run_workload(client, w, progress=False, warmup=warmup)


def test_times_chunks_and_reads_usage(server):
    server.script = stream_of(["Hel", "lo", " the", "re", "!"], FIRST, GAP, usage=(17, 9))
    [run] = _run(HttpClient(server.url))
    assert len(run.results) == 2
    for r in run.results:
        assert r.ok, r.error
        assert r.text == "Hello there!" and r.finish_reason == "length"
        assert FIRST <= r.ttft < FIRST + 2.0            # the server waited FIRST before its first chunk
        itls = sorted(r.itls)
        assert len(itls) == 4 and GAP / 2 <= itls[len(itls) // 2] < GAP + 1.0
        assert (r.prompt_tokens, r.output_tokens) == (17, 9)   # usage, not the 5 chunks
        assert r.token_ids is None


def test_sends_a_greedy_streaming_chat_request(server):
    server.script = stream_of(["ok"], 0.0, 0.0)
    client = HttpClient(server.url + "/v1", api_key="sk-test", seed=5, ignore_eos=True)
    _run(client, requests=1, concurrency=1, max_tokens=7)
    body = server.bodies[0]
    assert body["model"] == "fake-model"          # discovered from GET /v1/models
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert (body["temperature"], body["max_tokens"], body["seed"], body["ignore_eos"]) == (0, 7, 5, True)
    assert body["messages"][-1]["role"] == "user"
    assert server.headers[0]["Authorization"] == "Bearer sk-test"


def test_served_model_name_wins(server):
    server.script = stream_of(["ok"], 0.0, 0.0)
    _run(HttpClient(server.url, served_model="llama3.2:1b"), requests=1, concurrency=1)
    assert server.bodies[0]["model"] == "llama3.2:1b" and "ignore_eos" not in server.bodies[0]


def test_without_usage_counts_chunks(server):
    server.script = stream_of(["a", "b", "c"], 0.0, 0.01)
    [run] = _run(HttpClient(server.url), requests=1, concurrency=1)
    r = run.results[0]
    assert (r.prompt_tokens, r.output_tokens) == (None, 3)


def test_http_error_is_recorded_then_fails_the_level(server):
    server.script = Script(status=400, error_body='{"error": {"message": "max_tokens is too large"}}')
    with pytest.raises(BenchError, match="every request at concurrency 2 failed: HTTP 400: max_tokens is too large"):
        _run(HttpClient(server.url))


def test_warmup_failure_stops_early(server):
    server.script = Script(status=404, error_body='{"error": {"message": "model \'x\' does not exist"}}')
    with pytest.raises(BenchError, match="warm-up request failed: HTTP 404: model 'x' does not exist"):
        _run(HttpClient(server.url, served_model="x"), warmup=1)
    assert len(server.bodies) == 1


@pytest.mark.parametrize("event, needle", [
    ('data: {"error": {"message": "engine step failed"}}\n\n', "the server reported: engine step failed"),
    ("data: <html>oops</html>\n\n", "not an OpenAI chunk"),
    ('data: {"choices": ["oops"]}\n\n', "not an OpenAI chunk"),
])
def test_bad_stream(server, event, needle):
    server.script = Script(events=[(0.0, event)])
    with pytest.raises(BenchError, match=needle):
        _run(HttpClient(server.url), requests=1, concurrency=1)


def test_unreachable_url():
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(BenchError, match=f"cannot reach http://127.0.0.1:{port}: "):
        HttpClient(f"http://127.0.0.1:{port}").discover()


@pytest.mark.parametrize("url, expected", [
    ("http://h:8000", ("http", "h:8000", "/v1")),
    ("http://h:8000/", ("http", "h:8000", "/v1")),
    ("https://h/v1", ("https", "h", "/v1")),
    ("http://h/api/v1/chat/completions", ("http", "h", "/api/v1")),
])
def test_api_base(url, expected):
    assert api_base(url) == expected


@pytest.mark.parametrize("url", ["ftp://h/v1", "localhost:8000", "http://"])
def test_api_base_rejects(url):
    with pytest.raises(BenchError, match="--url must be an http"):
        api_base(url)


def test_sse_events():
    lines = [b": keep-alive\n", b"data: {\"a\": 1}\r\n", b"\r\n", b"event: message\n", b"data: line one\n",
             b"data:line two\n", b"\n", b"data: [DONE]\n"]
    assert list(sse_events(lines)) == ['{"a": 1}', "line one\nline two", "[DONE]"]


def test_parse_chunk():
    c = parse_chunk('{"choices": [{"delta": {"reasoning_content": "hm", "content": "Hi"}, "finish_reason": null}]}')
    assert (c.text, c.finish_reason) == ("hmHi", None)
    c = parse_chunk('{"choices": [{"text": " there", "finish_reason": "stop"}]}')   # /v1/completions
    assert (c.text, c.finish_reason) == (" there", "stop")
    c = parse_chunk('{"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}')
    assert (c.text, c.prompt_tokens, c.completion_tokens) == ("", 3, 4)
    assert parse_chunk('{"error": "overloaded"}').error == "overloaded"
    with pytest.raises(ValueError):
        parse_chunk("[1, 2]")
