"""The tool guard's retries on a real engine (a tiny random llama, prompt-mode tools): each retry's
prompt extends what the engine has already computed, so the prefix cache serves all of it but the
new tokens (issue 20: a retry costs only the new tokens)."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from hearth.api import guarded
from hearth.api.app import create_app
from hearth.api.served import ServedModel
from hearth.engine.async_engine import AsyncEngine
from hearth.llm import LLM
from hearth.tool_guard.checks import NO_CALL, Checked, Problem
from tests.gguf_factory import write_tiny_gguf

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
BLOCK = 16


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "tiny-llama.gguf"
    write_tiny_gguf(path, "llama", context=2048)
    llm = LLM(str(path), max_model_len=1024, progress=False, block_size=BLOCK)
    served = ServedModel.from_llm(llm, ["tiny"], AsyncEngine(llm.engine))
    with TestClient(create_app(served)) as c:
        yield c


def test_retries_compute_only_their_new_tokens(client, monkeypatch):
    real, seen = guarded.check_calls, []

    def two_failures(held, schemas, required):  # whatever the random model says, the first two fail
        seen.append(len(seen))
        if len(seen) <= 2:
            return Checked(list(held), [Problem(NO_CALL, "scripted: a call was due")])
        return real(held, schemas, required)

    monkeypatch.setattr(guarded, "check_calls", two_failures)
    monkeypatch.setattr(guarded, "NO_RETRY_FINISH", ())  # a random model always runs to max_tokens
    body = {"model": "tiny", "max_tokens": 12, "temperature": 0, "tools": [WEATHER],
            "messages": [{"role": "system", "content": "the capital of france is paris " * 12},
                         {"role": "user", "content": "hello world"}]}
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    ext, usage = r.json()["hearth"], r.json()["usage"]
    resample, reprompt = ext["retries"]
    assert (resample["kind"], reprompt["kind"]) == ("resample", "reprompt")
    first_prompt = usage["prompt_tokens"] - resample["prompt_tokens"] - reprompt["prompt_tokens"]
    assert first_prompt > 4 * BLOCK
    # the resample's prompt is the first prompt plus what the first attempt wrote
    new = resample["prompt_tokens"] - first_prompt
    assert 0 <= new <= body["max_tokens"]
    assert resample["prompt_tokens"] - resample["cached_tokens"] <= new + BLOCK
    # the re-prompt adds the failed answer and the error; everything before it is cached
    new = reprompt["prompt_tokens"] - first_prompt
    assert 0 < new < first_prompt
    assert reprompt["prompt_tokens"] - reprompt["cached_tokens"] <= new + BLOCK
    assert reprompt["cached_tokens"] >= first_prompt - BLOCK


def test_a_held_call_streams_as_the_grammar_writes_it(client):
    """A real grammar: under tool_choice required, a closed schema is held, so the call streams as
    the engine writes it (id and name, then pieces), and the guard finds it valid at the end."""
    closed = {"type": "function", "function": {"name": "w", "parameters": {
        "type": "object", "properties": {"c": {"enum": ["xy", "z"]}}, "required": ["c"], "additionalProperties": False}}}
    body = {"model": "tiny", "max_tokens": 400, "temperature": 0, "tools": [closed], "tool_choice": "required",
            "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with client.stream("POST", "/v1/chat/completions", json=body) as s:
        chunks = [json.loads(line[6:]) for line in s.iter_lines() if line.startswith("data: ") and line != "data: [DONE]"]
    pieces = [tc for c in chunks for tc in c["choices"][0]["delta"].get("tool_calls") or []]
    assert pieces[0]["id"].startswith("call_") and pieces[0]["function"] == {"name": "w", "arguments": ""}
    assert len(pieces) >= 3 and json.loads("".join(p["function"]["arguments"] for p in pieces))["c"] in ("xy", "z")
    finish = chunks[-1]
    assert finish["choices"][0]["finish_reason"] == "tool_calls" and finish["hearth"]["outcome"] == "ok"
    assert finish["hearth"]["calls"][0]["id"] == pieces[0]["id"] and finish["hearth"]["retries"] == []


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "weather.get"}}],
                         ids=["required", "named"])
def test_a_dotted_tool_name_round_trips_through_the_grammar_and_parser(client, choice):
    """MCP clients name tools `server.tool`: a 400 before (OpenAI's name pattern), vLLM takes them. The
    call grammar writes the dotted name, the parser reads it back and the guard finds the call valid."""
    dotted = {"type": "function", "function": {"name": "weather.get", "parameters": {
        "type": "object", "properties": {"c": {"enum": ["xy", "z"]}}, "required": ["c"], "additionalProperties": False}}}
    other = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}
    body = {"model": "tiny", "max_tokens": 300, "temperature": 0, "tools": [other, dotted], "tool_choice": choice,
            "messages": [{"role": "user", "content": "hi"}]}
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    choice0 = r.json()["choices"][0]
    calls = choice0["message"]["tool_calls"]
    assert choice0["finish_reason"] == "tool_calls" and r.json()["hearth"]["outcome"] == "ok", r.json()
    if isinstance(body["tool_choice"], dict):
        assert [c["function"]["name"] for c in calls] == ["weather.get"]
        assert json.loads(calls[0]["function"]["arguments"])["c"] in ("xy", "z")
    else:
        assert {c["function"]["name"] for c in calls} <= {"weather", "weather.get"}
