"""`hearth cluster serve` on a local Ray instance: two SmolLM2 replicas behind one front end, driven
through the official SDKs; prefix routing seen in the replicas' prefix-cache counters; a replica
killed under load; /metrics per replica."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import anthropic
import httpx2
import openai
import pytest

from hearth.cluster.router import make_router
from tests.cluster.conftest import API_KEY

TIMEOUT = 300  # a shared 2-core machine can take seconds per step; no test waits this long when it passes


def _openai(cluster, cls=openai.OpenAI):
    return cls(base_url=cluster.url + "/v1", api_key=API_KEY, timeout=TIMEOUT, max_retries=0)


def metrics(cluster) -> dict[tuple[str, str], float]:
    """(sample name, replica label or "") -> value."""
    text = httpx2.get(cluster.url + "/metrics", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=TIMEOUT).text
    out = {}
    for line in text.splitlines():
        if line.startswith("hearth:"):
            name, value = line.rsplit(" ", 1)
            replica = name.split('replica="')[1].split('"')[0] if 'replica="' in name else ""
            key = (name.split("{")[0], replica)
            out[key] = out.get(key, 0.0) + float(value)
    return out


def test_openai_and_anthropic_sdks_streamed_and_not(cluster):
    client = _openai(cluster)
    messages = [{"role": "user", "content": "Name three colors."}]
    whole = client.chat.completions.create(model=cluster.model, messages=messages, max_tokens=16, temperature=0)
    assert whole.choices[0].message.content and whole.choices[0].finish_reason in ("stop", "length")
    assert whole.usage.completion_tokens > 0
    chunks = list(client.chat.completions.create(model=cluster.model, messages=messages, max_tokens=16,
                                                 temperature=0, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    claude = anthropic.Anthropic(base_url=cluster.url, api_key=API_KEY, timeout=TIMEOUT, max_retries=0)
    msg = claude.messages.create(model=cluster.model, max_tokens=16, messages=messages, temperature=0)
    assert msg.content[0].text and msg.stop_reason in ("end_turn", "max_tokens")
    with claude.messages.stream(model=cluster.model, max_tokens=16, messages=messages, temperature=0) as s:
        assert "".join(s.text_stream)
        assert s.get_final_message().stop_reason in ("end_turn", "max_tokens")
    with pytest.raises(openai.AuthenticationError):  # the front end's auth, as hearth serve's
        openai.OpenAI(base_url=cluster.url + "/v1", api_key="wrong", max_retries=0).models.list()


def test_bad_request_is_a_400_from_the_front_end(cluster):
    with pytest.raises(openai.BadRequestError, match="context"):
        _openai(cluster).completions.create(model=cluster.model, prompt="hi " * 3000, max_tokens=4)
