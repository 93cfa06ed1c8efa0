"""Every optional field of every request body of the three APIs takes JSON null as "not given"
(OpenAI's schema allows null; openai-agents, langchain and others send it): the answer and what
reaches the engine are those of the same request without the field. The fields come from the
request models themselves, so a field added later is covered too."""

from __future__ import annotations

import pytest

from hearth.api.anthropic_protocol import CountTokensRequest, MessagesRequest
from hearth.api.openai_protocol import ChatCompletionRequest, CompletionRequest
from hearth.api.responses_protocol import ResponsesRequest

USER = [{"role": "user", "content": "hi"}]
ROUTES = [
    ("/v1/chat/completions", ChatCompletionRequest, {"model": "fake-model", "messages": USER}),
    ("/v1/completions", CompletionRequest, {"model": "fake-model", "prompt": "hi"}),
    ("/v1/messages", MessagesRequest, {"model": "fake-model", "messages": USER, "max_tokens": 5}),
    ("/v1/messages/count_tokens", CountTokensRequest, {"model": "fake-model", "messages": USER}),
    ("/v1/responses", ResponsesRequest, {"model": "fake-model", "input": "hi"}),
]
# null with a meaning of its own (vLLM's too): completions' max_tokens null is "until the context is full"
OWN_MEANING = {("/v1/completions", "max_tokens")}
CASES = [(path, name, base) for path, model, base in ROUTES
         for name, field in model.model_fields.items() if not field.is_required()]


@pytest.mark.parametrize("path,name,base", CASES, ids=[f"{p}:{n}" for p, n, _ in CASES])
def test_null_is_not_given(fake, path, name, base):
    omitted_body = {k: v for k, v in base.items() if k != name}
    omitted = fake.client.post(path, json=omitted_body)
    n_added = len(fake.engine.added)
    params = fake.last.params if n_added else None
    r = fake.client.post(path, json={**omitted_body, name: None})
    assert r.status_code == omitted.status_code, r.text
    if r.status_code != 200:  # e.g. responses' input: required either way, with the same message
        assert r.json() == omitted.json()
    elif len(fake.engine.added) > n_added and (path, name) not in OWN_MEANING:
        assert fake.last.params == params


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {"messages": USER, "stream": True, "stream_options": {"include_usage": None}}),
    ("/v1/chat/completions", {"messages": USER, "response_format": {"type": "json_schema", "json_schema": {
        "name": "a", "schema": {"type": "object"}, "strict": None, "description": None}}}),
    ("/v1/messages", {"messages": USER, "max_tokens": 5, "thinking": {"type": "enabled", "budget_tokens": None}}),
])
def test_null_inside_nested_fields_is_not_given(fake, path, body):
    assert fake.client.post(path, json={"model": "fake-model", **body}).status_code == 200
