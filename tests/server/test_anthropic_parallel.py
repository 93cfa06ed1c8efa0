"""Anthropic's `tool_choice.disable_parallel_tool_use: true` is OpenAI's `parallel_tool_calls: false`:
the same call grammar (the answer ends after one call), one tool_use block in the reply whatever the
model wrote, and an answer that opens with a call streams it as written (the grammar holds it to the
end). Against a scripted engine (tests/server/fakes.py), which writes its script grammar or not."""

from __future__ import annotations

import json

import pytest

from tests.server.test_tool_guard import WEATHER

A_WEATHER = {"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}
ONE_CALL = {"type": "auto", "disable_parallel_tool_use": True}


def _message(script: str, **kw) -> dict:
    return {"model": "fake-model", "max_tokens": 64, "messages": [{"role": "user", "content": f"script:{script}"}],
            "tools": [A_WEATHER], **kw}


def whole(fake, script: str, **kw) -> dict:
    r = fake.client.post("/v1/messages", json=_message(script, **kw))
    assert r.status_code == 200, r.text
    return r.json()


def events(fake, script: str, **kw) -> list[dict]:
    with fake.client.stream("POST", "/v1/messages", json={**_message(script, **kw), "stream": True}) as r:
        assert r.status_code == 200
        return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]


def test_the_call_grammar_is_openais_parallel_tool_calls_false(fake):
    def grammar(path: str, body: dict) -> str:
        assert fake.client.post(path, json=body).status_code == 200
        return fake.last.params.structured_output.grammar

    openai = {"model": "fake-model", "messages": [{"role": "user", "content": "script:tool"}], "tools": [WEATHER]}
    one = grammar("/v1/chat/completions", {**openai, "parallel_tool_calls": False})
    assert "main: TEXT | call END_WS" in one  # the answer ends after one call
    assert grammar("/v1/messages", _message("tool", tool_choice=ONE_CALL)) == one
    assert grammar("/v1/messages", _message("tool")) == grammar("/v1/chat/completions", openai) != one
    assert grammar("/v1/messages", _message("tool", tool_choice={"type": "auto",
                                                                  "disable_parallel_tool_use": False})) != one


@pytest.mark.parametrize("mode", ["off", "grammar", "guard"])
def test_one_tool_use_block_whatever_the_model_wrote(fake, mode):
    ext = {"hearth": {"tool_guard": mode}}
    r = whole(fake, "two_tools", tool_choice=ONE_CALL, **ext)
    assert [b["input"] for b in r["content"] if b["type"] == "tool_use"] == [{"city": "Paris"}]
    assert r["stop_reason"] == "tool_use"
    starts = [e["content_block"] for e in events(fake, "two_tools", tool_choice=ONE_CALL, **ext)
              if e["type"] == "content_block_start"]
    assert [b["type"] for b in starts] == ["tool_use"]
    both = whole(fake, "two_tools", **ext)  # parallel calls allowed: both
    assert [b["input"]["city"] for b in both["content"] if b["type"] == "tool_use"] == ["Paris", "Rome"]


def test_an_opening_call_streams_as_written(fake):
    """A fenced call at the start of the answer streams only where the grammar ends the answer after it."""
    def pieces(**kw) -> list[str]:
        return [e["delta"]["partial_json"] for e in events(fake, "guard_fence", **kw)
                if e["type"] == "content_block_delta" and e["delta"]["type"] == "input_json_delta"]

    assert len(pieces()) == 1  # held, sent once validated
    streamed = pieces(tool_choice=ONE_CALL)
    assert len(streamed) >= 2 and json.loads("".join(streamed)) == {"city": "Paris"}


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_a_flag_that_is_not_a_boolean_is_a_400(fake, path):
    r = fake.client.post(path, json=_message("tool", tool_choice={"type": "auto", "disable_parallel_tool_use": "yes"}))
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert r.json()["error"]["message"] == "tool_choice.disable_parallel_tool_use: must be a boolean, not a string"


def test_the_flag_is_read_once_a_request(fake, monkeypatch):
    """The guard's hint and the reply read the same answer: computed once in _guarded, passed on."""
    from hearth.api import anthropic_routes
    calls = []
    real = anthropic_routes._parallel
    monkeypatch.setattr(anthropic_routes, "_parallel", lambda body: calls.append(body) or real(body))
    assert whole(fake, "tool", tool_choice=ONE_CALL)["stop_reason"] == "tool_use" and len(calls) == 1
