"""OpenAI's batch files, as its Batch API and `vllm run-batch` read and write them: one request a line
in ({"custom_id", "method": "POST", "url", "body"}), one result a line out ({"id", "custom_id",
"response": {"status_code", "request_id", "body"}, "error"}), in the input's order. A request the
server refuses is a result too (its status and error body), as OpenAI's; `error` is for a request
that got no answer at all."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from hearth.errors import HearthError

URLS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses",
        "/v1/rerank", "/v2/rerank", "/rerank", "/v1/score", "/score")
"""The routes a batch line may name: the server's own, answered whole (a reranker's under each spelling
vLLM's run-batch takes)."""


SHOWN = 5
"""Bad lines a refusal names (the rest counted)."""


@dataclass(frozen=True, slots=True)
class BatchLine:
    number: int
    """Its line in the file, from 1."""
    custom_id: str
    url: str
    body: dict


def read_lines(lines: Iterable[str], source: str) -> list[BatchLine]:
    """Every request of a batch file (none for an empty one), all checked before any runs (a bad line costs
    nothing already answered); raises HearthError naming the first bad line and how many more there are."""
    out, bad, seen = [], [], {}
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            line = _line(number, text, seen)
        except ValueError as e:
            bad.append(f"line {number}: {e}")
            continue
        seen[line.custom_id] = number
        out.append(line)
    if bad:  # one line naming the first few, so a file is mended in one pass
        more = f" (and {len(bad) - SHOWN} more bad lines)" if len(bad) > SHOWN else ""
        raise HearthError(f"{source} {'; '.join(bad[:SHOWN])}{more}")
    return out


def _line(number: int, text: str, seen: dict[str, int]) -> BatchLine:
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise ValueError(f"not JSON ({e})") from None
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    custom_id, method, url, body = (obj.get(k) for k in ("custom_id", "method", "url", "body"))
    if not isinstance(custom_id, str) or not custom_id:
        raise ValueError("custom_id must be a non-empty string")
    if custom_id in seen:
        raise ValueError(f"custom_id {custom_id!r} repeats line {seen[custom_id]}'s")
    if method != "POST":
        raise ValueError(f"method must be \"POST\", not {method!r}")
    if url not in URLS:
        raise ValueError(f"url {url!r} is not one a batch may name ({', '.join(URLS)})")
    if not isinstance(body, dict):
        raise ValueError("body must be a JSON object")
    if body.get("stream"):
        raise ValueError("body.stream: a batch's answers are whole; leave stream out")
    return BatchLine(number, custom_id, url, body)


def result_row(line: BatchLine, status: int, body) -> dict:
    """The output line of line's answer (status and JSON body as the route gave them)."""
    request_id = body.get("id") if isinstance(body, dict) and status == 200 else None
    return {"id": f"batch_req_{uuid.uuid4().hex}", "custom_id": line.custom_id,
            "response": {"status_code": status, "request_id": request_id or f"req_{uuid.uuid4().hex}",
                         "body": body},
            "error": None}


def error_row(line: BatchLine, message: str) -> dict:
    """The output line of a request that got no answer (the server failed on it)."""
    return {"id": f"batch_req_{uuid.uuid4().hex}", "custom_id": line.custom_id, "response": None,
            "error": {"code": "server_error", "message": message}}
