"""Streaming over HTTP with speculation: a stop string inside an accepted run ends the stream there with the
plain server's text and finish_reason, nothing past the stop is streamed, and stream_options.include_usage
(and continuous_usage_stats) count the tokens the client got, as the plain server does. A tiny Q8_0 model
drafts for itself, so nearly every draft is accepted and runs of several tokens reach the stream at once."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from hearth.api.app import create_app
from hearth.api.served import ServedModel
from hearth.engine.async_engine import AsyncEngine
from hearth.llm import LLM
from tests.gguf_factory import SPECULATES, write_tiny_gguf

PROMPT = "one two three one two three one two"


@pytest.fixture(scope="module")
def clients(tmp_path_factory):
    """(plain, speculating) clients over the same tiny model, and the speculating LLM."""
    path = tmp_path_factory.mktemp("spec-stream") / "tiny.gguf"
    write_tiny_gguf(path, "llama", qtype="Q8_0", **SPECULATES)
    spec = {"method": "draft", "model": str(path), "num_speculative_tokens": 4, "cost_aware": False}
    llms = [LLM(str(path), max_model_len=256, progress=False),
            LLM(str(path), max_model_len=256, progress=False, speculative_config=spec)]
    with (TestClient(create_app(ServedModel.from_llm(llms[0], ["tiny"], AsyncEngine(llms[0].engine)))) as plain,
          TestClient(create_app(ServedModel.from_llm(llms[1], ["tiny"], AsyncEngine(llms[1].engine)))) as fast):
        yield plain, fast, llms[1]


def stream(client, body: dict) -> list[dict]:
    r = client.post("/v1/completions", json={**body, "stream": True})
    assert r.status_code == 200, r.text
    lines = [ln[6:] for ln in r.text.splitlines() if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(ln) for ln in lines[:-1]]


def text_of(chunks: list[dict]) -> str:
    return "".join(c["choices"][0]["text"] for c in chunks if c["choices"])


def finish_of(chunks: list[dict]) -> str | None:
    return next(c["choices"][0]["finish_reason"] for c in reversed(chunks) if c["choices"])


@pytest.mark.usefixtures("native_speculation")
@pytest.mark.parametrize("at", [3, 9, 17])
def test_a_stop_inside_an_accepted_run_ends_the_stream_as_without_speculation(clients, at):
    plain, fast, llm = clients
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 32, "temperature": 0}
    whole, again = (c.post("/v1/completions", json=body).json()["choices"][0]["text"] for c in (plain, fast))
    assert again == whole  # (and both servers' prefix caches hold the same prompt)
    stop = next(s for i in range(at, len(whole)) if (s := whole[i:i + 2]).isprintable() and s.strip())
    accepted = llm.engine.spec.stats.num_accepted_tokens
    opts = {"stop": [stop], "stream_options": {"include_usage": True}}
    want, got = stream(plain, {**body, **opts}), stream(fast, {**body, **opts})
    assert text_of(got) == text_of(want) == whole[:whole.index(stop)]
    assert finish_of(got) == finish_of(want) == "stop"
    assert got[-1]["usage"] == want[-1]["usage"] and got[-1]["usage"]["completion_tokens"] > 0
    assert llm.engine.spec.stats.num_accepted_tokens > accepted  # the answer came in accepted runs
    assert len([c for c in got if c["choices"]]) < len([c for c in want if c["choices"]])  # several tokens a chunk


@pytest.mark.usefixtures("native_speculation")
def test_continuous_usage_counts_every_accepted_token(clients):
    plain, fast, _ = clients
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 24, "temperature": 0,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    want, got = stream(plain, body), stream(fast, body)
    assert text_of(got) == text_of(want) and finish_of(got) == finish_of(want) == "length"
    assert got[-1]["usage"] == want[-1]["usage"] and got[-1]["usage"]["completion_tokens"] == 24
    done = [c["usage"]["completion_tokens"] for c in got]
    assert done == sorted(done) and len(set(done)) < 24  # counted as they come, a run at a time
    # each chunk's count is the tokens streamed so far: the plain stream's count where its text was as long
    by_text = {len(text_of(want[:i + 1])): c["usage"]["completion_tokens"] for i, c in enumerate(want) if c["choices"]}
    for i, c in enumerate(got):
        if c["choices"] and (n := len(text_of(got[:i + 1]))) in by_text:
            assert c["usage"]["completion_tokens"] == by_text[n]
