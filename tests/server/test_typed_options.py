"""metadata, reasoning effort, Responses' text.format and Anthropic's metadata are typed as OpenAI and Anthropic
type them (hearth.api.typed_options): a bad one was echoed back as sent (`"reasoning": {"effort": 5}`) or
ignored; now a 400 naming it. A good effort reaches the template as `reasoning_effort`."""

from __future__ import annotations

import pytest

USER = [{"role": "user", "content": "hi"}]
SCHEMA = {"type": "object"}
# (route, the body's own fields, the message's start)
CASES = [
    ("/v1/responses", {"reasoning": {"effort": 5}}, "reasoning.effort: Input should be 'none', 'minimal'"),
    ("/v1/responses", {"reasoning": {"effort": "max"}}, "reasoning.effort: Input should be"),
    ("/v1/responses", {"reasoning": {"summary": True}}, "reasoning.summary: Input should be 'auto'"),
    ("/v1/responses", {"reasoning": "high"}, "reasoning: Input should be a valid dictionary"),
    ("/v1/responses", {"metadata": {"a": 1}}, "metadata.a: Input should be a valid string"),
    ("/v1/responses", {"metadata": {"a": {"b": "c"}}}, "metadata.a: Input should be a valid string"),
    ("/v1/responses", {"metadata": {str(i): "x" for i in range(17)}}, "metadata: Dictionary should have at most 16"),
    ("/v1/responses", {"metadata": {"k" * 65: "x"}}, f"metadata.{'k' * 65}: String should have at most 64"),
    ("/v1/responses", {"metadata": {"k": "x" * 513}}, "metadata.k: String should have at most 512"),
    ("/v1/responses", {"metadata": ["a"]}, "metadata: Input should be a valid dictionary"),
    ("/v1/responses", {"text": {"format": {"type": "json_schema", "name": 5, "schema": SCHEMA}}},
     "text.format.name: Input should be a valid string"),
    ("/v1/responses", {"text": {"format": {"type": "json_schema", "schema": SCHEMA}}},
     "text.format.name: is required when type is 'json_schema'"),
    ("/v1/responses", {"text": {"format": {"type": "json_schema", "name": "a"}}},
     "text.format.schema: is required when type is 'json_schema'"),
    ("/v1/responses", {"text": {"format": {"type": "json_schema", "name": "a", "schema": SCHEMA, "strict": "yes"}}},
     "text.format.strict: Input should be a valid boolean"),
    ("/v1/responses", {"text": {"format": {"type": "json_schema", "name": "a", "schema": SCHEMA, "description": 1}}},
     "text.format.description: Input should be a valid string"),
    ("/v1/responses", {"text": {"format": {"type": "yaml"}}}, "text.format.type: Input should be 'text'"),
    ("/v1/responses", {"text": {"format": "json_object"}}, "text.format: Input should be a valid dictionary"),
    ("/v1/responses", {"text": {"verbosity": 3}}, "text.verbosity: Input should be 'low'"),
    ("/v1/chat/completions", {"reasoning_effort": 5}, "reasoning_effort: Input should be 'none', 'minimal'"),
    ("/v1/chat/completions", {"metadata": {"a": None}}, "metadata.a: Input should be a valid string"),
    ("/v1/chat/completions", {"response_format": {"type": "json_schema", "json_schema": {"name": 5}}},
     "response_format.json_schema.name: Input should be a valid string"),
    # OpenAI's rule for a schema's name: a-z, A-Z, 0-9, underscores and dashes, at most 64 characters
    ("/v1/chat/completions", {"response_format": {"type": "json_schema", "json_schema": {"name": "my schema"}}},
     "response_format.json_schema.name: String should match pattern '^[a-zA-Z0-9_-]+$'"),
    ("/v1/chat/completions", {"response_format": {"type": "json_schema", "json_schema": {"name": ""}}},
     "response_format.json_schema.name: String should match pattern"),
    ("/v1/chat/completions", {"response_format": {"type": "json_schema", "json_schema": {"name": "n" * 65}}},
     "response_format.json_schema.name: String should have at most 64 characters"),
    ("/v1/responses", {"text": {"format": {"type": "json_schema", "name": "pet.v1", "schema": SCHEMA}}},
     "text.format.name: String should match pattern '^[a-zA-Z0-9_-]+$'"),
    ("/v1/responses", {"text": {"format": {"type": "json_schema", "name": "n" * 65, "schema": SCHEMA}}},
     "text.format.name: String should have at most 64 characters"),
    ("/v1/messages", {"metadata": {"user_id": 5}}, "metadata.user_id: Input should be a valid string"),
    ("/v1/messages", {"metadata": {"session": "x"}}, "metadata.session: Extra inputs are not permitted"),
    ("/v1/messages", {"metadata": {"user_id": "u" * 257}}, "metadata.user_id: String should have at most 256"),
]
BASE = {"/v1/responses": {"input": "hi"}, "/v1/chat/completions": {"messages": USER},
        "/v1/messages": {"messages": USER, "max_tokens": 4}}


@pytest.mark.parametrize("route,fields,words", CASES, ids=[f"{r}:{w.split(':')[0]}" for r, _, w in CASES])
def test_a_badly_typed_option_is_a_400_naming_it(fake, route, fields, words):
    r = fake.client.post(route, json={"model": "fake-model", **BASE[route], **fields})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["message"].startswith(words), r.text
    if route != "/v1/messages":  # Anthropic's error body has no param
        assert error["param"] == words.split(":")[0]
    assert not fake.engine.added


def test_responses_echo_what_was_typed(fake):
    body = {"model": "fake-model", "input": "hi", "reasoning": {"effort": "low", "summary": "auto"},
            "metadata": {"k": "x" * 512, "l" * 64: ""},
            "text": {"format": {"type": "json_schema", "name": "Pet_v1-" + "n" * 57, "schema": SCHEMA, "strict": True},
                     "verbosity": "low"}}
    r = fake.client.post("/v1/responses", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["reasoning"] == {"effort": "low", "summary": "auto"}
    assert out["metadata"] == body["metadata"]
    assert out["text"] == body["text"]
    plain = fake.client.post("/v1/responses", json={"model": "fake-model", "input": "hi"}).json()
    assert plain["text"] == {"format": {"type": "text"}} and plain["reasoning"] == {"effort": None, "summary": None}


EFFORT_TEMPLATE = "{{ reasoning_effort | default('unset') }}|{% for m in messages %}{{ m.content }}{% endfor %}"


@pytest.mark.parametrize("route,body", [
    ("/v1/chat/completions", {"messages": USER, "reasoning_effort": "high"}),
    ("/v1/responses", {"input": "hi", "reasoning": {"effort": "high"}}),
])
def test_the_effort_reaches_the_template(make_fake, route, body):
    fake = make_fake(EFFORT_TEMPLATE)
    assert fake.client.post(route, json={"model": "fake-model", **body}).status_code == 200
    assert fake.last.prompt.startswith("high|")


def test_chat_template_kwargs_win_over_reasoning_effort(make_fake):
    fake = make_fake(EFFORT_TEMPLATE)
    r = fake.client.post("/v1/chat/completions", json={"model": "fake-model", "messages": USER, "reasoning_effort": "high",
                                                       "chat_template_kwargs": {"reasoning_effort": "low"}})
    assert r.status_code == 200 and fake.last.prompt.startswith("low|")
    assert "x-hearth-ignored-fields" not in r.headers


def test_a_chat_schema_name_by_openais_rule_is_taken(fake):
    name = "Pet_v1-" + "n" * 57  # every kind of character allowed, 64 of them
    r = fake.client.post("/v1/chat/completions", json={"model": "fake-model", "messages": USER, "response_format": {
        "type": "json_schema", "json_schema": {"name": name, "schema": SCHEMA}}})
    assert r.status_code == 200, r.text
