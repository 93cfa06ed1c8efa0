"""Server-sent events of an OpenAI-style stream: bytes lines -> event data -> text deltas.

Enough of the WHATWG event-stream rules for every OpenAI-compatible server: an event is its `data:`
lines joined by newlines, ended by a blank line; comments (`:` keep-alives) and other fields are
skipped."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

DONE = "[DONE]"


def sse_events(lines: Iterable[bytes]) -> Iterator[str]:
    data: list[str] = []
    for raw in lines:
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


@dataclass(frozen=True, slots=True)
class Chunk:
    text: str = ""
    """New output text: content, reasoning (it is generated tokens too) or a completion's text."""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str | None = None


def parse_chunk(data: str) -> Chunk:
    """One event's JSON: a chat.completion.chunk, a text completion chunk, a usage-only chunk or an
    error object. Raises ValueError for data that is not a JSON object."""
    obj = json.loads(data)
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {data[:80]!r}")
    if "error" in obj:
        err = obj["error"]
        return Chunk(error=str(err.get("message", err) if isinstance(err, dict) else err))
    text, finish = "", None
    for choice in obj.get("choices") or []:
        delta = choice.get("delta") or {}
        parts = (delta.get("reasoning_content"), delta.get("reasoning"), delta.get("content"), choice.get("text"))
        text += "".join(p for p in parts if isinstance(p, str))
        finish = choice.get("finish_reason") or finish
    usage = obj.get("usage") or {}
    return Chunk(text, finish, usage.get("prompt_tokens"), usage.get("completion_tokens"))
