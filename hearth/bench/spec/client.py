"""One greedy chat request, streamed and timed where the client sees it, plus the server's
speculative counters: Prometheus /metrics (vLLM's spec_decode_* names, served by hearth and by
llama-server --metrics) and llama-server's per-request `timings` (draft_n, draft_n_accepted)."""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from hearth.bench.sse import DONE, parse_chunk, sse_events

REQUEST_TIMEOUT = 900.0
SPEC_COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")


@dataclass(slots=True)
class Sample:
    """One request's output and its times (time.perf_counter() seconds)."""

    text: str = ""
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    start: float = 0.0
    first: float | None = None
    """Arrival of the first chunk that carried output."""
    last: float | None = None
    end: float = 0.0
    finish_reason: str | None = None
    timings: dict | None = None
    """llama-server's timings object from its last chunk; hearth sends none."""
    error: str | None = None
    chunks: int = 0
    counters: dict[str, float] = field(default_factory=dict)
    """The spec-decode counters this request added (after - before)."""


def _connect(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(url)
    return http.client.HTTPConnection(parts.netloc, timeout=timeout), parts.path.rstrip("/")


def chat(url: str, messages: list[dict], max_tokens: int, seed: int = 0) -> Sample:
    """No "model" field: each server answers with the one model it serves."""
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "seed": seed,
            "stream": True, "stream_options": {"include_usage": True}}
    conn, base = _connect(url, REQUEST_TIMEOUT)
    s = Sample(start=time.perf_counter())
    try:
        conn.request("POST", f"{base}/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            s.error = f"HTTP {resp.status}: {resp.read()[:300].decode(errors='replace')}"
        else:
            _read(resp, s)
    except (OSError, http.client.HTTPException) as e:
        s.error = f"{url}: {e or type(e).__name__}"
    finally:
        conn.close()
        s.end = time.perf_counter()
    return s


def _read(resp, s: Sample) -> None:
    for data in sse_events(resp):
        if data.strip() == DONE:
            return
        try:
            chunk, raw = parse_chunk(data), json.loads(data)
        except (ValueError, AttributeError, TypeError):
            s.error = f"not an OpenAI chunk: {data[:80]!r}"
            return
        if chunk.error:
            s.error = chunk.error
            return
        if chunk.text:
            now = time.perf_counter()
            s.first = s.first if s.first is not None else now
            s.last, s.chunks, s.text = now, s.chunks + 1, s.text + chunk.text
        s.finish_reason = chunk.finish_reason or s.finish_reason
        if chunk.completion_tokens is not None:
            s.completion_tokens, s.prompt_tokens = chunk.completion_tokens, chunk.prompt_tokens
        if isinstance(raw.get("timings"), dict):
            s.timings = raw["timings"]


def parse_spec_counters(text: str) -> dict[str, float]:
    """Prometheus text -> {num_drafts, num_draft_tokens, num_accepted_tokens}, summed over labels,
    whatever the prefix (hearth:, llamacpp:, vllm:). Missing counters are absent."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0].split(":")[-1]  # hearth:x{labels} 1.0 -> x
        short = name.removeprefix("spec_decode_").removesuffix("_total")
        if not name.startswith("spec_decode_") or short not in SPEC_COUNTERS:
            continue
        rest = line.rsplit("}", 1)[1] if "}" in line else line.split(" ", 1)[-1]  # value [timestamp]
        try:
            out[short] = out.get(short, 0.0) + float(rest.split()[0])
        except (ValueError, IndexError):
            continue
    return out


def spec_counters(url: str) -> dict[str, float]:
    conn, base = _connect(url, 10.0)
    try:
        conn.request("GET", f"{base}/metrics")
        resp = conn.getresponse()
        return parse_spec_counters(resp.read().decode(errors="replace")) if resp.status == 200 else {}
    except (OSError, http.client.HTTPException):
        return {}
    finally:
        conn.close()


def counter_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0.0) for k in after}
