"""stream_options.continuous_usage_stats (vLLM's): with include_usage, every chunk of a chat or
completions stream carries the usage so far, then the usage chunk ends it as before; without
include_usage it adds nothing (as vLLM reads it)."""

from __future__ import annotations

import json

import pytest

CHAT = ("/v1/chat/completions", {"messages": [{"role": "user", "content": "script:hello"}]})
COMPLETIONS = ("/v1/completions", {"prompt": "script:hello"})


def _chunks(fake, route, options) -> list[dict]:
    path, body = route
    r = fake.client.post(path, json={**body, "stream": True, "stream_options": options})
    assert r.status_code == 200, r.text
    lines = [ln[6:] for ln in r.text.splitlines() if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(ln) for ln in lines[:-1]]


@pytest.mark.parametrize("route", [CHAT, COMPLETIONS], ids=["chat", "completions"])
def test_continuous_usage_stats_puts_the_usage_so_far_on_every_chunk(fake, route):
    chunks = _chunks(fake, route, {"include_usage": True, "continuous_usage_stats": True})
    usages = [c["usage"] for c in chunks]
    assert all(u is not None for u in usages)
    prompt = usages[0]["prompt_tokens"]
    assert prompt > 0 and all(u["prompt_tokens"] == prompt for u in usages)
    done = [u["completion_tokens"] for u in usages]
    assert done == sorted(done) and done[-1] == 4 and done[0] < 4  # "Hello there!": 4 tokens, counted as they come
    assert all(u["total_tokens"] == prompt + u["completion_tokens"] for u in usages)
    assert chunks[-1]["choices"] == []  # the usage chunk still ends the stream


@pytest.mark.parametrize("route", [CHAT, COMPLETIONS], ids=["chat", "completions"])
def test_without_include_usage_or_continuous_stats_the_chunks_are_as_before(fake, route):
    plain = _chunks(fake, route, {"include_usage": True})
    assert all(c["usage"] is None for c in plain[:-1]) and plain[-1]["usage"]["completion_tokens"] == 4
    alone = _chunks(fake, route, {"continuous_usage_stats": True})
    assert all("usage" not in c for c in alone) and all(c["choices"] for c in alone)
