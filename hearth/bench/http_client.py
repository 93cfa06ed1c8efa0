"""Any OpenAI-compatible server (hearth, llama-server, vLLM, Ollama, ...) measured the same way:
POST /v1/chat/completions with stream=true and stream_options.include_usage, greedy, timing each
SSE chunk as it arrives. Each request is a blocking http.client exchange on its own thread, so one
slow stream never delays another's timestamps."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from hearth.bench import BenchError
from hearth.bench.records import RequestResult
from hearth.bench.sse import DONE, parse_chunk, sse_events
from hearth.bench.workloads import BenchRequest, Workload

REQUEST_TIMEOUT = 600.0
"""Seconds a request may wait for its next byte."""
CONNECT_TIMEOUT = 10.0


def api_base(url: str) -> tuple[str, str, str]:
    """(scheme, host[:port], path of /v1) from a server address, its /v1 or its chat endpoint."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BenchError(f"--url must be an http:// or https:// address, got {url!r}")
    path = parts.path.rstrip("/")
    if path.endswith("/chat/completions"):
        path = path[: -len("/chat/completions")]
    elif not path.endswith("/v1"):
        path += "/v1"
    return parts.scheme, parts.netloc, path


def _why(e: BaseException) -> str:
    if isinstance(e, socket.gaierror):
        return "unknown host"
    if isinstance(e, TimeoutError):
        return "timed out"
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


def _error_body(status: int, body: bytes) -> str:
    try:
        err = json.loads(body).get("error")
        message = err.get("message") if isinstance(err, dict) else err
    except (ValueError, AttributeError):
        message = None
    text = message or body.decode("utf-8", errors="replace").strip()[:200]
    return f"HTTP {status}: {text}" if text else f"HTTP {status}"


class HttpClient:
    mode = "url"

    def __init__(self, url: str, served_model: str | None = None, api_key: str | None = None,
                 seed: int = 0, ignore_eos: bool = False):
        self.url = url
        self.scheme, self.netloc, self.base = api_base(url)
        self.served_model, self.api_key, self.seed, self.ignore_eos = served_model, api_key, seed, ignore_eos
        self._pool: ThreadPoolExecutor | None = None

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return cls(self.netloc, timeout=timeout)

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def discover(self) -> str:
        """Reach the server before any request (GET /v1/models) and settle the model name to send:
        --served-model, else the first model the server lists, else "default"."""
        conn = self._connect(CONNECT_TIMEOUT)
        try:
            conn.request("GET", f"{self.base}/models", headers=self._headers())
            resp = conn.getresponse()
            status, body = resp.status, resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise BenchError(f"cannot reach {self.url}: {_why(e)}") from None
        finally:
            conn.close()
        if status in (401, 403):
            raise BenchError(f"{self.url} refused us ({_error_body(status, body)}); pass --api-key")
        if self.served_model is None:
            self.served_model = _first_model(body) if status == 200 else None
            self.served_model = self.served_model or "default"
        return self.served_model

    async def start(self, workload: Workload) -> None:
        if self.served_model is None:
            self.discover()
        self._pool = ThreadPoolExecutor(max_workers=workload.max_concurrency, thread_name_prefix="bench-http")

    async def stop(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    async def send(self, req: BenchRequest, concurrency: int) -> RequestResult:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._send, req, concurrency)

    def body(self, req: BenchRequest) -> dict:
        body = {"model": self.served_model, "messages": req.messages, "max_tokens": req.max_tokens,
                "temperature": 0, "seed": self.seed, "stream": True, "stream_options": {"include_usage": True}}
        if self.ignore_eos:
            body["ignore_eos"] = True  # vLLM, llama-server and hearth take it; OpenAI itself does not
        return body

    def _send(self, req: BenchRequest, concurrency: int) -> RequestResult:
        result = RequestResult(req.index, concurrency, req.prompt_sha, start=time.perf_counter())
        conn = self._connect(REQUEST_TIMEOUT)
        try:
            conn.request("POST", f"{self.base}/chat/completions", json.dumps(self.body(req)), self._headers())
            resp = conn.getresponse()
            if resp.status != 200:
                result.error = _error_body(resp.status, resp.read())
            else:
                _read_stream(resp, result)
        except (OSError, http.client.HTTPException) as e:
            result.error = f"cannot reach {self.url}: {_why(e)}"
        finally:
            conn.close()
            result.end = time.perf_counter()
        return result


def _first_model(body: bytes) -> str | None:
    try:
        data = json.loads(body).get("data") or []
        return str(data[0]["id"]) if data else None
    except (ValueError, AttributeError, KeyError, TypeError, IndexError):
        return None


def _read_stream(resp, result: RequestResult) -> None:
    for data in sse_events(resp):
        if data.strip() == DONE:
            return
        try:
            chunk = parse_chunk(data)
        except (ValueError, AttributeError, TypeError):  # not JSON, or JSON of another shape
            result.error = f"the server sent data that is not an OpenAI chunk: {data[:80]!r}"
            return
        if chunk.error:
            result.error = f"the server reported: {chunk.error}"
            return
        if chunk.text:
            result.add_chunk(time.perf_counter(), chunk.text)
        result.finish_reason = chunk.finish_reason or result.finish_reason
        if chunk.completion_tokens is not None:
            result.prompt_tokens, result.usage_output_tokens = chunk.prompt_tokens, chunk.completion_tokens
