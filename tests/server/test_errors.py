"""The bad-input table (issue 4, point 7), limits, auth and CORS: every bad request is a 4xx with an
OpenAI- or Anthropic-shaped body that names the field; never a 500."""

from __future__ import annotations

import json
import logging

import pytest

from hearth.api.errors import from_hearth_error
from hearth.sampling_params import InvalidSamplingParams
from tests.server.fakes import FakeEngine

CHAT, COMPLETIONS, MESSAGES = "/v1/chat/completions", "/v1/completions", "/v1/messages"
USER = [{"role": "user", "content": "hi"}]
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}

# (path, body, status, param named in the message)
TABLE = [
    (CHAT, {}, 400, "messages"),
    (CHAT, {"messages": "hi"}, 400, "messages"),
    (CHAT, {"messages": []}, 400, "messages"),
    (CHAT, {"messages": ["hi"]}, 400, "messages[0]"),
    (CHAT, {"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages[0].role"),
    (CHAT, {"messages": [{"content": "x"}]}, 400, "messages[0].role"),
    (CHAT, {"messages": [{"role": "user"}]}, 400, "messages[0].content"),
    (CHAT, {"messages": [{"role": "user", "content": 5}]}, 400, "messages[0].content"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, 400,
     "messages[0].content[0].type"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "text"}]}]}, 400, "messages[0].content[0].text"),
    (CHAT, {"messages": [{"role": "tool", "content": "x"}]}, 400, "messages[0].tool_call_id"),
    # scalars are strict (docs/server-api.md), as OpenAI reads them: each was dropped or read without a word
    (CHAT, {"messages": [{"role": "tool", "content": "x", "tool_call_id": 5}]}, 400, "messages[0].tool_call_id"),
    (CHAT, {"messages": [{"role": "user", "content": "x", "name": 5}]}, 400, "messages[0].name"),
    (CHAT, {"messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "bogus", "function": {"name": "f", "arguments": "{}"}}]}, *USER]}, 400,
     "messages[0].tool_calls[0].type"),
    (CHAT, {"messages": USER, "tools": [{"type": "function", "function": {"name": "f", "description": 5}}]}, 400,
     "tools[0].function.description"),
    # OpenAI's names (^[a-zA-Z0-9_-]{1,64}$, and MCP's dots), each once
    (CHAT, {"messages": USER, "tools": [{"type": "function", "function": {"name": "bad name!"}}]}, 400,
     "tools[0].function.name"),
    (CHAT, {"messages": USER, "tools": [{"type": "function", "function": {"name": "get weather"}}]}, 400,
     "tools[0].function.name"),
    (CHAT, {"messages": USER, "tools": [{"type": "function", "function": {"name": "f" * 65}}]}, 400,
     "tools[0].function.name"),
    (CHAT, {"messages": USER, "tools": [TOOL, TOOL]}, 400, "tools[1].function.name"),
    (CHAT, {"messages": USER, "functions": [{"name": "f"}, {"name": "f"}]}, 400, "functions[1].name"),
    ("/v1/responses", {"input": "hi", "tools": [{"type": "function", "name": "a b"}]}, 400, "tools[0].name"),
    (CHAT, {"messages": USER, "response_format": {"type": "xml"}}, 400, "response_format.type"),
    (CHAT, {"messages": USER, "response_format": {"type": "json_schema"}}, 400, "response_format.json_schema"),
    (CHAT, {"messages": USER, "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, 400,
     "response_format.json_schema.schema"),
    (CHAT, {"messages": USER, "max_tokens": 0}, 400, "max_tokens"),
    (CHAT, {"messages": USER, "max_completion_tokens": 0}, 400, "max_completion_tokens"),
    (CHAT, {"messages": USER, "max_tokens": 10**6}, 400, "max_tokens"),
    (CHAT, {"messages": USER, "temperature": -1}, 400, "temperature"),
    (CHAT, {"messages": USER, "temperature": 2.5}, 400, "temperature"),  # OpenAI's range is 0 to 2
    (COMPLETIONS, {"prompt": "hi", "temperature": 3}, 400, "temperature"),
    ("/v1/responses", {"input": "hi", "temperature": 2.01}, 400, "temperature"),
    ("/v1/responses", {"input": []}, 400, "input: is empty: it must hold a message"),  # it read "is required"
    ("/v1/responses", {}, 400, "input: is required"),
    (CHAT, {"messages": USER, "top_p": -0.1}, 400, "top_p"),
    (CHAT, {"messages": USER, "n": 1000}, 400, "n"),
    (CHAT, {"messages": USER, "n": 0}, 400, "n"),
    (CHAT, {"messages": USER, "logprobs": True, "top_logprobs": 50}, 400, "top_logprobs"),
    (CHAT, {"messages": USER, "top_logprobs": 3}, 400, "top_logprobs"),  # without logprobs: true, as OpenAI
    (CHAT, {"messages": USER, "logprobs": False, "top_logprobs": 0}, 400, "top_logprobs"),
    (CHAT, {"messages": USER, "logit_bias": {"65": "x"}}, 400, "logit_bias"),
    (CHAT, {"messages": USER, "logit_bias": {"65": True}}, 400, "logit_bias"),
    (CHAT, {"messages": USER, "logit_bias": [[65, 1, 2]]}, 400, "logit_bias"),
    (CHAT, {"messages": USER, "logit_bias": [[{"a": 1}, 1]]}, 400, "logit_bias"),
    (CHAT, {"messages": USER, "logit_bias": {"": 1}}, 400, "logit_bias"),
    (CHAT, {"messages": USER, "stop": 5}, 400, "stop"),
    (CHAT, {"messages": USER, "stop": ["x", ""]}, 400, "stop"),  # matched at once: an empty answer
    (CHAT, {"messages": USER, "seed": 10**30}, 400, "seed"),  # failed the engine step of every request
    (CHAT, {"messages": USER, "min_tokens": 10, "max_tokens": 5}, 400, "min_tokens"),
    (CHAT, {"messages": USER, "tool_choice": "required"}, 400, "tool_choice"),
    (CHAT, {"messages": USER, "tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "g"}}}, 400,
     "tool_choice"),
    (CHAT, {"messages": USER, "tools": [TOOL], "tool_choice": {"type": "function"}}, 400,
     "tool_choice: needs the tool's name in function.name"),  # it read "names None, which is not one of the tools"
    (CHAT, {"messages": USER, "tools": [{"type": "function"}]}, 400, "tools[0].function.name"),
    # vLLM's tool rules: a type other than "function" is refused (none is "function"); names are not checked
    (CHAT, {"messages": USER, "tools": [TOOL, {"type": "retrieval", "function": TOOL["function"]}]}, 400,
     "tools[1].type"),
    (CHAT, {"messages": USER, "tools": [{"type": "function", "function": {"name": ""}}]}, 400,
     "tools[0].function.name"),
    # legacy functions are named as sent: functions[i].name, not tools[i].function.name
    (CHAT, {"messages": USER, "functions": [{"name": "f"}, {"parameters": {"type": "object"}}]}, 400,
     "functions[1].name"),
    (CHAT, {"messages": USER, "functions": [{"name": "f", "parameters": {"type": "object", "properties": {
        "d": {"type": "dict"}}}}]}, 400, "functions[0].parameters"),
    (CHAT, {"messages": USER, "tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]}, 400,
     "tools[0].function.parameters"),
    # not JSON Schema (BFCL's type names): no grammar or validation can read it
    (CHAT, {"messages": USER, "tools": [TOOL, {"type": "function", "function": {"name": "g", "parameters": {
        "type": "object", "properties": {"d": {"type": "dict"}}}}}]}, 400, "tools[1].function.parameters"),
    (CHAT, {"messages": USER, "model": "nope"}, 404, "model"),
    # strict scalars: a boolean is no integer, a string no boolean or number (each was coerced)
    (CHAT, {"messages": USER, "max_tokens": True}, 400, "max_tokens"),
    (CHAT, {"messages": USER, "stream": "yes"}, 400, "stream"),
    (CHAT, {"messages": USER, "logprobs": 1}, 400, "logprobs"),
    (CHAT, {"messages": USER, "n": "2"}, 400, "n"),
    (CHAT, {"messages": USER, "temperature": "0.5"}, 400, "temperature"),
    (CHAT, {"messages": USER, "temperature": True}, 400, "temperature"),
    (CHAT, {"messages": USER, "stop_token_ids": [True]}, 400, "stop_token_ids[0]"),
    (COMPLETIONS, {"prompt": "x", "echo": "yes"}, 400, "echo"),
    (COMPLETIONS, {"prompt": "x", "max_tokens": 2.0}, 400, "max_tokens"),
    (COMPLETIONS, {}, 400, "prompt"),
    (COMPLETIONS, {"prompt": []}, 400, "prompt"),
    (COMPLETIONS, {"prompt": "x", "max_tokens": -1}, 400, "max_tokens"),
    (COMPLETIONS, {"prompt": "x", "suffix": "y"}, 400, "suffix"),
    (COMPLETIONS, {"prompt": "x", "seed": -(2**64)}, 400, "seed"),
    (COMPLETIONS, {"prompt": "x", "model": "nope"}, 404, "model"),
    # OpenAI and vLLM refuse stream_options on a whole reply (it was accepted and did nothing)
    (CHAT, {"messages": USER, "stream_options": {"include_usage": True}}, 400, "stream_options"),
    (COMPLETIONS, {"prompt": "x", "stream": False, "stream_options": {"include_usage": True}}, 400, "stream_options"),
    # max_tokens 0 is prompt scoring, with echo only (lm-eval's loglikelihood)
    (COMPLETIONS, {"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
]
ANTHROPIC_TABLE = [
    ({"messages": USER}, 400, "max_tokens"),
    ({"messages": USER, "max_tokens": 0}, 400, "max_tokens"),
    ({"max_tokens": 5}, 400, "messages"),
    ({"max_tokens": 5, "messages": []}, 400, "messages"),
    ({"max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}, 400, "messages[0].role"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "video"}]}]}, 400, "messages[0].content[0].type"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_result"}]}]}, 400,
     "messages[0].content[0].tool_use_id"),
    ({"max_tokens": 5, "messages": USER, "tools": [{"input_schema": {}}]}, 400, "tools[0].name"),
    ({"max_tokens": 5, "messages": USER, "tools": [{"name": "f", "input_schema": {"type": "float"}}]}, 400,
     "tools[0].input_schema"),
    ({"max_tokens": 5, "messages": USER, "tools": [{"name": "f", "input_schema": {"type": "object"}}],
      "tool_choice": {"type": "tool", "name": "g"}}, 400, "tool_choice"),
    ({"max_tokens": 5, "messages": USER, "tools": [{"name": "f"}]}, 400, "tools[0].input_schema"),
    ({"max_tokens": 5, "messages": USER, "tools": [{"name": "f", "description": 5, "input_schema": {"type": "object"}}]},
     400, "tools[0].description: must be a string, not a number"),  # it was taken, and rendered as 5
    # a tool_use input of values that are no object's was str()-ed into the call
    *(({"max_tokens": 5, "messages": [*USER, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "f", **given}]}]}, 400, f"messages[1].content[0].input: {why}")
      for given, why in [({"input": [1]}, "must be an object, not a list"),
                         ({"input": 5}, "must be an object, not a number")]),
    # Anthropic's server tools run on Anthropic's servers: never a schema-less function here
    ({"max_tokens": 5, "messages": USER, "tools": [{"type": "web_search_20250305", "name": "web_search",
                                                    "max_uses": 5}]}, 400, "is an Anthropic server tool, which hearth"),
    ({"max_tokens": 5, "messages": USER, "tools": [{"type": "code_execution_20250522", "name": "code_execution"}]},
     400, "tools[0].type: 'code_execution_20250522' is an Anthropic server tool"),
    ({"max_tokens": 5, "messages": USER, "tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}]}, 400,
     "tools[0].type"),
    ({"max_tokens": 5, "messages": USER, "model": "nope"}, 404, "model"),
    ({"max_tokens": 5, "messages": USER, "stop_sequences": [""]}, 400, "stop_sequences"),
    ({"max_tokens": 5, "messages": USER, "temperature": 3}, 400, "temperature"),  # Anthropic's range is [0, 1]
    ({"max_tokens": 5, "messages": USER, "temperature": -0.5}, 400, "temperature"),
    ({"max_tokens": 4, "messages": USER, "thinking": {"type": "enabled", "budget_tokens": 1024}}, 400,
     "thinking.budget_tokens"),  # the budget is part of max_tokens
    ({"max_tokens": 2000, "messages": USER, "thinking": {"type": "enabled", "budget_tokens": 100}}, 400,
     "thinking.budget_tokens"),  # at least 1024
    ({"max_tokens": 5, "messages": USER, "thinking": {"type": "sometimes"}}, 400, "thinking.type"),
    ({"max_tokens": True, "messages": USER}, 400, "max_tokens"),
    ({"max_tokens": 5, "messages": USER, "stream": "yes"}, 400, "stream"),
    # Anthropic's own 400s for empty input (its words; it had reached the template and the model)
    *(({"max_tokens": 5, "messages": messages}, 400, f"{where}: all messages must have non-empty content except for "
                                                     "the optional final assistant message")
      for messages, where in [([{"role": "user", "content": ""}], "messages[0].content"),
                              ([{"role": "user", "content": []}], "messages[0].content"),
                              ([*USER, {"role": "assistant", "content": ""}, {"role": "user", "content": []}],
                               "messages[2].content"),
                              ([{"role": "assistant", "content": ""}], "messages")]),  # alone: no turn left
    ({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}]}, 400,
     "messages[0].content[0].text: text content blocks must be non-empty"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text",
                                                                                                  "text": " \n"}]}]},
     400, "messages[0].content[1].text: text content blocks must contain non-whitespace text"),
]


@pytest.mark.parametrize("path,body,field,param", [
    (COMPLETIONS, {"prompt": ""}, "prompt", "prompt"),  # encodes to no token (the engine's "prompt is empty")
    (COMPLETIONS, {"prompt": ["x", ""]}, "prompt[1]", "prompt"),
    (COMPLETIONS, {"prompt": "a\ud800"}, "prompt", "prompt"),
    (CHAT, {"messages": [{"role": "user", "content": "a\ud800"}]}, "messages[0].content", "messages[0].content"),
    (CHAT, {"messages": [*USER, {"role": "user", "content": [{"type": "text", "text": "\udfff"}]}]},
     "messages[1].content[0].text", "messages[1].content[0].text"),
])
@pytest.mark.parametrize("stream", [False, True])
def test_an_empty_prompt_or_a_lone_surrogate_names_its_field(fake, path, body, field, param, stream):
    """Each was a 400 with `param: null` (the engine's and the tokenizer's refusals know no field).
    The fake tokenizer refuses neither: the route's own check answers. json.dumps spells a lone
    surrogate as JSON may ("\\ud800"); the client cannot encode it as UTF-8."""
    r = fake.client.post(path, content=json.dumps({**body, "stream": stream}).encode(),
                         headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["message"].startswith(f"{field}: "), error


@pytest.mark.parametrize("path,body,param", [
    (CHAT, {"messages": USER, "response_format": {"type": "json_schema", "json_schema": {
        "name": "a", "schema": {"type": "no-such-type"}}}}, "response_format.json_schema.schema"),
    ("/v1/responses", {"input": "hi", "text": {"format": {"type": "json_schema", "name": "a",
                                                            "schema": {"type": "no-such-type"}}}}, "text.format.schema"),
    (MESSAGES, {"messages": USER, "max_tokens": 5, "output_config": {"format": {
        "type": "json_schema", "schema": {"type": "no-such-type"}}}}, "output_config.format.schema"),
])
@pytest.mark.parametrize("stream", [False, True])
def test_a_schema_the_grammar_engine_refuses_names_its_field(fake, path, body, param, stream):
    """It was a 400 with `param: null` and a message that named no field."""
    r = fake.client.post(path, json={**body, "stream": stream})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["message"].startswith(f"{param}: invalid json_schema"), error
    if path != MESSAGES:
        assert error["param"] == param


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS, MESSAGES])
@pytest.mark.parametrize("content", [b'[1, 2]', b'"hi"'])
def test_a_body_that_is_no_json_object(fake, path, content):
    """It said "request body: Input should be a valid dictionary or object to extract fields from"."""
    r = fake.client.post(path, content=content, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert message.startswith("the request body must be a JSON object"), message


BODY = b'{"messages": [{"role": "user", "content": "hi"}], "prompt": "x", "max_tokens": 5}'


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS, MESSAGES, "/completion"])
@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded", "text/plain; charset=utf-8", None])
def test_a_json_body_is_read_whatever_its_content_type(fake, path, content_type):
    """As llama-server and Ollama read it: `curl -d '{...}'` sends a form type (was a 400 blaming the header)."""
    headers = {"content-type": content_type} if content_type else {}
    r = fake.client.post(path, content=BODY, headers=headers)
    assert r.status_code == 200, r.text


def test_a_form_body_is_a_400_naming_the_json_error(fake):
    r = fake.client.post(CHAT, content=b"model=x&max_tokens=5", headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"].startswith("malformed JSON body: "), r.text


@pytest.mark.parametrize("path,body,status,param", TABLE)
def test_openai_bad_input(fake, path, body, status, param):
    r = fake.client.post(path, json=body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"].startswith(param) or f"{param}:" in error["message"] or f"'{param}'" in error["message"] \
        or error["param"] == param, error
    assert error["type"] == ("not_found_error" if status == 404 else "invalid_request_error")


def test_a_prompt_that_fills_the_context_says_no_room_is_left(make_fake):
    """It said "prompt is 64 tokens but the context holds 64", as if it fit."""
    fake = make_fake(engine=FakeEngine(max_model_len=64))
    for path, body in [(COMPLETIONS, {"prompt": [65] * 64}), (CHAT, {"messages": USER})]:
        if path == CHAT:  # the rendered chat prompt's length, measured, made to fill the context
            fake.client.post(CHAT, json={"messages": USER, "max_tokens": 1})
            pad = 64 - len(fake.last.prompt)
            body = {"messages": [{"role": "user", "content": "hi" + "x" * pad}]}
        err = fake.client.post(path, json=body).json()["error"]
        assert err["message"].startswith("prompt is 64 tokens, which fills the context (64) and leaves no room "
                                         "for an answer (the prompt must be shorter than the context); "), err
        assert err["code"] == "context_length_exceeded"


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS, MESSAGES, "/v1/responses", "/completion", "/tokenize"])
@pytest.mark.parametrize("content", [b"", b" \r\n\t "], ids=["empty", "whitespace"])
def test_an_empty_body_is_named_empty(fake, path, content):
    """It said "request body: Field required"; a body of only whitespace said "malformed JSON body:
    Expecting value"."""
    r = fake.client.post(path, content=content, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["message"] == "the request body is empty; it must be a JSON object"
    assert error["type"] == "invalid_request_error"


def test_a_body_of_other_whitespace_is_malformed_json(fake):
    """Only JSON's own whitespace makes an empty body: a vertical tab is no JSON at all."""
    r = fake.client.post(CHAT, content=b"\x0b", headers={"content-type": "application/json"})
    assert r.json()["error"]["message"].startswith("malformed JSON body: "), r.text


def test_llama_server_routes_keep_an_unbounded_temperature(fake):
    """OpenAI's routes refuse a temperature above 2 (the table); llama-server's take it, as llama-server does."""
    r = fake.client.post("/completion", json={"prompt": "hi", "temperature": 2.5})
    assert r.status_code == 200 and fake.last.params.temperature == 2.5
    assert fake.client.post(CHAT, json={"messages": USER, "temperature": 2}).status_code == 200


@pytest.mark.parametrize("call,param,why", [
    ({"id": 5, "function": {"name": "f", "arguments": "{}"}}, "id", "must be a string, not a number"),
    ({"id": "c1", "function": {"name": "f", "arguments": 5}}, "function.arguments",
     "must be a string of JSON (or an object), not a number"),
    ({"id": "c1", "function": {"name": "f", "arguments": ["x"]}}, "function.arguments",
     "must be a string of JSON (or an object), not a list"),
], ids=["id-number", "arguments-number", "arguments-list"])
def test_a_wrong_typed_history_tool_call_is_refused(fake, call, param, why):
    """`id: 5` became the string "5" and `arguments: 5` the string "5", where OpenAI refuses both."""
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [{"type": "function", **call}]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    r = fake.client.post(CHAT, json={"messages": messages})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == f"messages[1].tool_calls[0].{param}"
    assert error["message"] == f"messages[1].tool_calls[0].{param}: {why}"


def test_history_tool_call_arguments_may_be_an_object(fake):
    """vLLM takes parsed arguments (transformers' convention); so does hearth, and renders them as given."""
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"city": "Oslo"}}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    assert fake.client.post(CHAT, json={"messages": messages}).status_code == 200
    assert '"city": "Oslo"' in fake.last.prompt


def test_a_wrong_typed_tool_call_id_is_named_as_such(fake):
    """It was "is required for a tool message" though the client gave one."""
    r = fake.client.post(CHAT, json={"messages": [{"role": "tool", "content": "x", "tool_call_id": 5}]})
    assert r.json()["error"]["message"] == "messages[0].tool_call_id: must be a string, not a number"


@pytest.mark.parametrize("path,body", [
    (CHAT, {"messages": USER, "tools": [{"function": TOOL["function"]}]}),  # no type: a function (vLLM's default)
    (CHAT, {"messages": USER, "tools": [{"type": "function", "function": {"name": "weather.get"}}]}),  # MCP names
    (CHAT, {"messages": USER, "functions": [{"name": "weather.get"}], "function_call": {"name": "weather.get"}}),
    (MESSAGES, {"max_tokens": 5, "messages": USER, "tools": [{"name": "f", "input_schema": {"type": "object"}}] * 2}),
    # Anthropic-defined client tools: the client runs them, Anthropic's API takes them
    (MESSAGES, {"max_tokens": 5, "messages": USER, "tools": [{"type": "bash_20250124", "name": "bash"}]}),
    (MESSAGES, {"max_tokens": 5, "messages": USER, "tools": [
        {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
        {"type": "computer_20250124", "name": "computer", "display_width_px": 1024, "display_height_px": 768}]}),
], ids=["no-type", "dotted", "legacy-dotted", "anthropic-duplicate", "bash",
        "editor-computer"])
def test_tools_vllm_and_anthropic_accept_pass(fake, path, body):
    r = fake.client.post(path, json={**body, "max_tokens": 2})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("body,status,param", ANTHROPIC_TABLE)
def test_anthropic_bad_input(fake, body, status, param):
    r = fake.client.post(MESSAGES, json=body)
    assert r.status_code == status, r.text
    payload = r.json()
    assert payload["type"] == "error" and set(payload["error"]) == {"type", "message"}
    assert payload["error"]["type"] == ("not_found_error" if status == 404 else "invalid_request_error")
    assert param in payload["error"]["message"], payload


@pytest.mark.parametrize("path,body", [
    (CHAT, {"messages": USER, "temperature": 1, "top_p": 1, "logit_bias": {"65": 1}, "presence_penalty": 0}),
    (COMPLETIONS, {"prompt": [1, 2], "max_tokens": 2, "temperature": 0}),
    (MESSAGES, {"messages": USER, "max_tokens": 5, "temperature": 1, "top_p": 1}),
    ("/v1/responses", {"input": "hi", "temperature": 0, "max_output_tokens": 5}),
])
def test_an_integer_is_still_a_float(fake, path, body):
    """Strict scalars refuse booleans and strings, not a whole number where a float goes (JSON has one number type)."""
    assert fake.client.post(path, json=body).status_code == 200


def test_anthropic_turns_its_api_takes_pass(fake):
    """Consecutive user turns are one turn (Anthropic combines them: a template that wants roles to
    alternate renders them), a first assistant turn passes (Anthropic's own API takes it), and an
    empty final assistant message prefills nothing (the answer starts a fresh assistant turn; it
    was rendered as a closed, empty assistant turn)."""
    def prompt(messages: list[dict]) -> str:
        r = fake.client.post(MESSAGES, json={"max_tokens": 5, "messages": messages})
        assert r.status_code == 200, r.text
        return fake.engine.added[-1].prompt

    one = prompt([{"role": "user", "content": "hi\nthere"}])
    assert prompt([{"role": "user", "content": "hi"}, {"role": "user", "content": "there"}]) == one
    assert prompt([{"role": "user", "content": "hi"}, {"role": "user", "content": [{"type": "text", "text": "there"}]}]) == one
    assert prompt([*USER, {"role": "assistant", "content": ""}]) == prompt(USER)
    assert prompt([*USER, {"role": "assistant", "content": []}]) == prompt(USER)
    assert prompt([{"role": "assistant", "content": "hello"}, *USER]).endswith("hi<|im_end|>\n<|im_start|>assistant\n")
    # a small model's empty or blank answer, echoed back by an agent loop, passes (hearth sent it)
    blank = prompt([*USER, {"role": "assistant", "content": [{"type": "text", "text": "\n\n"}]}, *USER])
    assert "<|im_start|>assistant\n\n\n<|im_end|>" in blank
    assert prompt([*USER, {"role": "assistant", "content": []}, *USER]) == prompt([*USER, *USER]) == \
        prompt([{"role": "user", "content": "hi\nhi"}])


def test_replayed_tool_use_inputs_and_null_descriptions_pass_as_what_they_mean(fake):
    """Agents replay a tool_use input as a JSON string, [] or null (LangSmith, some SDKs) and MCP bridges
    send `description: null` for a tool without a docstring: the object meant, and no description
    (a null reached the template as None)."""
    def prompt(path: str, body: dict) -> str:
        r = fake.client.post(path, json={"max_tokens": 5, **body})
        assert r.status_code == 200, r.text
        return fake.engine.added[-1].prompt

    def replayed(**given) -> str:
        return prompt(MESSAGES, {"messages": [*USER, {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "f", **given}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}]})

    assert replayed(input='{"a": 1}') == replayed(input={"a": 1})
    assert replayed(input=None) == replayed(input=[]) == replayed() == replayed(input={})
    for path, tool in [(MESSAGES, {"name": "f", "description": None, "input_schema": {"type": "object"}}),
                       (CHAT, {"type": "function", "function": {**TOOL["function"], "description": None}})]:
        text = prompt(path, {"messages": USER, "tools": [tool]})
        assert "None" not in text and '"f"' in text, text


def test_anthropic_thinking_and_temperature_in_range_pass(fake):
    for extra in ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, {"thinking": {"type": "disabled"}},
                  {"temperature": 1}, {"temperature": 0.0}):
        r = fake.client.post(MESSAGES, json={"messages": USER, "max_tokens": 2000, **extra})
        assert r.status_code == 200, (extra, r.text)


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS, MESSAGES])
def test_malformed_json(fake, path):
    r = fake.client.post(path, content=b'{"messages": [', headers={"content-type": "application/json"})
    assert r.status_code == 400 and "malformed JSON" in r.text


def test_prompt_too_long_names_both_numbers(make_fake):
    fake = make_fake(engine=FakeEngine(max_model_len=60))
    long = [{"role": "user", "content": "x" * 100}]
    r = fake.client.post(CHAT, json={"messages": long})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    message = r.json()["error"]["message"]
    assert "60" in message and str(len(fake.client.post("/tokenize", json={"messages": long}).json()["tokens"])) in message
    r = fake.client.post(MESSAGES, json={"messages": long, "max_tokens": 5})
    assert r.status_code == 400 and "60" in r.json()["error"]["message"]
    assert not fake.engine.live


@pytest.mark.parametrize("path,body,param", [
    (CHAT, {"messages": [{"role": "user", "content": "x" * 100}]}, "messages"),
    (COMPLETIONS, {"prompt": "x" * 100}, "prompt"),
    ("/v1/responses", {"input": "x" * 100}, "input"),
])
def test_prompt_too_long_names_the_route_s_prompt_field(make_fake, path, body, param):
    fake = make_fake(engine=FakeEngine(max_model_len=60))
    r = fake.client.post(path, json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


@pytest.mark.parametrize("path,body,field", [
    (CHAT, {"messages": USER}, "max_tokens"),
    (CHAT, {"messages": USER}, "max_completion_tokens"),
    (CHAT, {"messages": USER, "tools": [TOOL]}, "max_tokens"),  # the guard's path
    (COMPLETIONS, {"prompt": ["hi", "a longer prompt"]}, "max_tokens"),  # the longest prompt counts
    (MESSAGES, {"messages": USER}, "max_tokens"),
    ("/v1/responses", {"input": "hi"}, "max_output_tokens"),
])
def test_max_tokens_past_the_context_is_400_naming_the_field(make_fake, path, body, field):
    """OpenAI's and vLLM's answer; it was taken and cut at the context's end."""
    ctx = 600  # the fake tokenizer is one token a character: the tools' prompt is ~260
    fake = make_fake(engine=FakeEngine(max_model_len=ctx))
    r = fake.client.post(path, json={**body, field: ctx - 1})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    message = error["message"]
    assert f"maximum context length is {ctx} tokens" in message and f"{ctx - 1} in {field}" in message, message
    prompt = int(message.split("(")[1].split(" in the prompt")[0])
    assert 1 < prompt < ctx and f"{field} can be at most {ctx - prompt}" in message
    if path != MESSAGES:
        assert error["param"] == field and error["code"] == "context_length_exceeded"
    assert not fake.engine.added
    assert fake.client.post(path, json={**body, field: ctx - prompt}).status_code == 200  # exactly the room: fits
    assert fake.client.post(path, json=body if path != MESSAGES else {**body, field: 5}).status_code == 200
    if path != MESSAGES:  # not given: the room left caps it (the engine ends it with finish_reason "length")
        assert fake.engine.added[-1].params.max_tokens == (16 if path == COMPLETIONS else None)  # OpenAI's defaults


def test_completions_default_max_tokens_shrinks_to_the_room_left(make_fake):
    """16 when not given (OpenAI's default), but not an error where the prompt leaves less."""
    fake = make_fake(engine=FakeEngine(max_model_len=60))
    assert fake.client.post(COMPLETIONS, json={"prompt": "x" * 50}).status_code == 200
    assert fake.engine.added[-1].params.max_tokens == 10
    assert fake.client.post(COMPLETIONS, json={"prompt": "x" * 50, "max_tokens": 11}).json()["error"]["param"] == "max_tokens"


@pytest.mark.parametrize("path,body,param", [
    (COMPLETIONS, {"prompt": ["a"] * 9}, "prompt"), (COMPLETIONS, {"prompt": "a", "n": 9}, "n"),
    (CHAT, {"messages": USER, "n": 9, "tools": [TOOL]}, "n"),  # the guard's choices: 9 requests of n = 1
])
def test_a_batch_larger_than_the_server_ever_holds_is_400_not_429(make_fake, path, body, param):
    """A 429 says "retry later", and every retry of this one would fail."""
    fake = make_fake(engine=FakeEngine(max_in_flight=8), max_n=16)
    r = fake.client.post(path, json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    assert "(8:" in r.json()["error"]["message"] and not fake.engine.added
    assert fake.client.post(COMPLETIONS, json={"prompt": ["a"] * 8}).status_code == 200


def test_empty_prompt(fake):
    r = fake.client.post(COMPLETIONS, json={"prompt": ""})
    assert r.status_code == 400 and "empty" in r.json()["error"]["message"]


def test_queue_full_is_429(make_fake):
    fake = make_fake(engine=FakeEngine(max_in_flight=3))
    fake.engine.live.add("busy")  # another client's request
    r = fake.client.post(CHAT, json={"messages": USER, "n": 3})
    assert r.status_code == 429 and r.headers["retry-after"] == "1"
    assert r.json()["error"]["type"] == "rate_limit_exceeded"
    assert fake.engine.live == {"busy"}  # the two that fitted were aborted
    fake.engine.live.clear()
    r = fake.client.post(MESSAGES, json={"messages": USER, "max_tokens": 4})
    assert r.status_code == 200
    fake.engine.max_in_flight = 1
    fake.engine.live.add("busy")
    assert fake.client.post(MESSAGES, json={"messages": USER, "max_tokens": 4}).json()["error"]["type"] == "rate_limit_error"


def test_body_too_large(make_fake):
    fake = make_fake(max_body_bytes=2000)
    r = fake.client.post(CHAT, json={"messages": [{"role": "user", "content": "x" * 5000}]})
    assert r.status_code == 413 and "at most 2000 (hearth serve --max-body-mb)" in r.json()["error"]["message"]
    chunks = (b'{"messages": [{"role": "user", "content": "' + b"x" * 1000 + b'"}' for _ in range(3))
    r = fake.client.post(CHAT, content=chunks, headers={"content-type": "application/json"})  # chunked, no length
    assert r.status_code == 413
    assert fake.client.post(CHAT, json={"messages": USER}).status_code == 200


def test_server_limits_on_n_and_max_tokens(make_fake):
    fake = make_fake(max_n=2, max_tokens=100)
    assert fake.client.post(CHAT, json={"messages": USER, "n": 3}).json()["error"]["param"] == "n"
    assert fake.client.post(CHAT, json={"messages": USER, "max_tokens": 101}).json()["error"]["param"] == "max_tokens"
    assert fake.client.post(CHAT, json={"messages": USER, "n": 2, "max_tokens": 100}).status_code == 200


@pytest.mark.parametrize("path,body", [
    (CHAT, {"messages": USER}),
    (COMPLETIONS, {"prompt": "hi"}),  # OpenAI's default of 16 is past the limit: bounded by it, not a 400
    ("/completion", {"prompt": "hi", "n_predict": -1}),
    ("/completion", {"prompt": "hi"}),
    ("/v1/responses", {"input": "hi"}),
])
def test_max_tokens_limit_bounds_a_request_that_asks_none(make_fake, path, body):
    """--max-tokens-limit is the max_tokens of a request that sets none (it ran to the context's end)."""
    fake = make_fake(max_tokens=10)
    r = fake.client.post(path, json={"model": "fake-model", **body})
    assert r.status_code == 200, r.text
    assert fake.last.params.max_tokens == 10


def test_max_tokens_limit_is_named_where_it_bounds(make_fake):
    fake = make_fake(max_tokens=10)
    err = fake.client.post(CHAT, json={"messages": USER, "max_tokens": 20}).json()["error"]
    assert err["param"] == "max_tokens" and "--max-tokens-limit" in err["message"] and "context" not in err["message"]
    err = fake.client.post(MESSAGES, json={"messages": USER, "max_tokens": 20}).json()["error"]
    assert "max_tokens" in err["message"] and "--max-tokens-limit" in err["message"]
    # a limit past the context: the context bounds it, and is named
    fake = make_fake(engine=FakeEngine(max_model_len=64), max_tokens=1000)
    err = fake.client.post(CHAT, json={"messages": USER, "max_tokens": 100}).json()["error"]
    assert "context holds 64" in err["message"] and "--max-tokens-limit" not in err["message"]
    # a prompt near the context's end, no max_tokens: the limit is not a 400, the room left ends the answer
    fake = make_fake(engine=FakeEngine(max_model_len=60), max_tokens=10)
    assert fake.client.post(CHAT, json={"messages": [{"role": "user", "content": "x" * 5}]}).status_code == 200
    assert len(fake.last.prompt) > 50 and fake.last.params.max_tokens == 10


def test_unknown_route_and_method(fake):
    assert fake.client.get("/v1/nothing").json()["error"]["type"] == "not_found_error"
    r = fake.client.get(CHAT)
    assert r.status_code == 405 and "error" in r.json()
    assert fake.client.get("/v1/models/nope").status_code == 404


@pytest.mark.parametrize("headers,status", [
    ({}, 401),
    ({"Authorization": "Bearer wrong"}, 401),
    ({"Authorization": "Bearer sekrit"}, 200),
    ({"authorization": "bearer sekrit"}, 200),
    ({"x-api-key": "sekrit"}, 200),
    ({"x-api-key": "sekri"}, 401),
])
def test_api_key(make_fake, headers, status):
    fake = make_fake(api_key="sekrit")
    assert fake.client.get("/v1/models", headers=headers).status_code == status
    r = fake.client.post(MESSAGES, json={"messages": USER, "max_tokens": 2}, headers=headers)
    assert r.status_code == status
    if status == 401:
        assert r.json()["error"]["type"] == "authentication_error"
    assert fake.client.get("/health").status_code == 200
    assert fake.client.get("/").status_code == 200


@pytest.mark.parametrize("headers,why", [
    ({}, "missing API key"),
    ({"Authorization": "sekrit"}, "malformed Authorization header: it must be 'Authorization: Bearer KEY'"),
    ({"Authorization": "Bearer"}, "malformed Authorization header"),
    ({"Authorization": "Basic c2Vrcml0"}, "malformed Authorization header"),
    ({"Authorization": "Bearer nope"}, "invalid API key"),
])
def test_api_key_refusals_say_what_was_wrong(make_fake, headers, why):
    """`Authorization: sk-local` (no "Bearer ") was "missing API key": the header was there, malformed."""
    fake = make_fake(api_key="sekrit")
    r = fake.client.get("/v1/models", headers=headers)
    assert r.status_code == 401 and r.json()["error"]["message"].startswith(why), r.text
    assert "sekrit" not in r.text and "c2Vrcml0" not in r.text  # the header's value is not echoed
    assert fake.client.get("/v1/models", headers={"Authorization": "sekrit", "x-api-key": "sekrit"}).status_code == 200


def test_no_webui_is_an_api_only_server(make_fake):
    """llama-server's --no-webui: no chat page (/ answers Ollama's heartbeat text, /static/ a 404), the APIs as
    before; `hearth serve --no-webui` sets it."""
    from hearth.cli import command_parser
    from hearth.commands.serve import server_config

    fake = make_fake(webui=False)
    r = fake.client.get("/")
    assert (r.status_code, r.text, r.headers["content-type"].split(";")[0]) == (200, "hearth is running", "text/plain")
    assert fake.client.head("/").status_code == 200 and fake.client.get("/static/app.js").status_code == 404
    assert fake.client.get("/v1/models").status_code == 200
    assert make_fake().client.get("/").status_code == 200
    for argv, webui in ((["m"], True), (["m", "--no-webui"], False), (["m", "--webui"], True)):
        assert server_config(command_parser("serve").parse_intermixed_args(argv)).webui is webui


def test_cors(make_fake):
    fake = make_fake(cors_origins=["http://ok.example"], api_key="k")
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"}
    r = fake.client.options(CHAT, headers={"Origin": "http://ok.example", **preflight})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://ok.example"
    assert "authorization" in r.headers["access-control-allow-headers"].lower()
    r = fake.client.options(CHAT, headers={"Origin": "http://evil.example", **preflight})
    assert "access-control-allow-origin" not in r.headers and "--cors-origins" in r.text
    r = fake.client.options(CHAT, headers={"Origin": "http://localhost:3000", **preflight})
    assert r.headers["access-control-allow-origin"] == "http://localhost:3000"  # added to the local ones, as Ollama's
    r = fake.client.get("/v1/models", headers={"Origin": "http://ok.example", "Authorization": "Bearer k"})
    assert r.headers["access-control-allow-origin"] == "http://ok.example"


PREFLIGHT = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"}


def test_only_local_pages_by_default(fake):
    """Without --cors-origins, as Ollama's default origins: pages on this machine and desktop apps' schemes are
    let in; another origin is not, and its preflight is a 403 naming --cors-origins (it was a bare 405)."""
    r = fake.client.get("/v1/models", headers={"Origin": "http://ok.example"})
    assert r.status_code == 403 and "access-control-allow-origin" not in r.headers
    for origin in ("http://localhost:3000", "http://127.0.0.1:8080", "https://localhost", "http://[::1]:5173",
                   "app://obsidian.md", "vscode-webview://abc"):
        r = fake.client.options(CHAT, headers={"Origin": origin, **PREFLIGHT})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin, (origin, r.text)
    assert fake.client.get("/v1/models", headers={"Origin": "http://localhost:3000"}).headers[
        "access-control-allow-origin"] == "http://localhost:3000"
    for origin in ("http://ok.example", "http://localhost.evil.example", "http://127.0.0.1.evil.example:80",
                   "https://evil.example/http://localhost"):
        r = fake.client.options(CHAT, headers={"Origin": origin, **PREFLIGHT})
        assert r.status_code == 403 and "access-control-allow-origin" not in r.headers, (origin, r.text)
        assert f"--cors-origins {origin}" in r.json()["error"]["message"]


def test_a_page_on_another_origin_cannot_make_the_server_generate(fake):
    """A cross-origin POST with a text/plain body needs no preflight, and hearth reads any body as JSON: it ran
    (the page could not read the answer, but any site the user visited could spend their server). Refused; the
    server's own pages (Origin = the Host it was sent to) and clients that send no Origin still pass."""
    body = json.dumps({"messages": USER, "max_tokens": 2})
    r = fake.client.post(CHAT, content=body, headers={"Origin": "http://evil.example", "Content-Type": "text/plain"})
    assert r.status_code == 403 and "--cors-origins http://evil.example" in r.text and not fake.engine.added
    for headers in ({"Origin": "http://192.168.1.5:8080", "Host": "192.168.1.5:8080"},
                    {"Origin": "http://localhost:3000"}, {}):
        assert fake.client.post(CHAT, content=body, headers={**headers, "Content-Type": "text/plain"}).status_code == 200
    # a name re-pointed at this machine (DNS rebinding) is same-origin with itself: refused unless let in
    rebound = {"Origin": "http://evil.example:8080", "Host": "evil.example:8080", "Content-Type": "text/plain"}
    assert fake.client.post(CHAT, content=body, headers=rebound).status_code == 403


@pytest.mark.parametrize("path,body,hint", [
    (CHAT, {"messages": USER, "max_token": 5, "vendor_extra": {"x": 1}}, "max_tokens"),
    (COMPLETIONS, {"prompt": "x", "max_token": 5, "vendor_extra": None}, "max_tokens"),
    (MESSAGES, {"messages": USER, "max_tokens": 5, "max_token": 5, "vendor_extra": 1}, "max_tokens"),
    ("/v1/responses", {"input": "hi", "max_output_token": 5, "vendor_extra": 1}, "max_output_tokens"),
])
@pytest.mark.parametrize("stream", [False, True])
def test_unknown_fields_are_ignored_but_named(fake, caplog, path, body, hint, stream):
    """Not rejected (clients send vendor extras), not silent: a header names them, the log once per
    (route, field), with the field a near miss was meant to be. A typo of max_tokens ran to the context's end."""
    typo = next(k for k in body if k.startswith("max_") and k != "max_tokens")
    with caplog.at_level(logging.WARNING, logger="hearth.api"):
        for _ in range(2):
            r = fake.client.post(path, json={**body, "stream": stream})
            assert r.status_code == 200, r.text
            assert r.headers["x-hearth-ignored-fields"] == f"{typo},vendor_extra"
    lines = [rec.getMessage() for rec in caplog.records if "ignored unknown field" in rec.getMessage()]
    assert len(lines) == 2, lines  # once per field, not per request
    assert lines[0].startswith(f"{path}: ") and f"{typo!r}, did you mean {hint!r}?" in lines[0]
    assert "'vendor_extra'" in lines[1] and "did you mean" not in lines[1]
    assert "x-hearth-ignored-fields" not in fake.client.post(path, json={k: v for k, v in body.items()
                                                                         if k not in (typo, "vendor_extra")}).headers


def test_ignored_fields_header_on_errors_and_odd_names(fake):
    r = fake.client.post(CHAT, json={"messages": USER, "max_token": 5, "temperature": -1})
    assert r.status_code == 400 and r.headers["x-hearth-ignored-fields"] == "max_token"
    r = fake.client.post(CHAT, json={"messages": USER, "a b\nc": 1, "é": 2, **{f"k{i}": i for i in range(40)}})
    assert r.status_code == 200
    names = r.headers["x-hearth-ignored-fields"].split(",")
    assert names[:2] == ["a%20b%0Ac", "%C3%A9"] and len(names) == 33 and names[-1] == "+10 more"
    # vendor extras through the SDK still work
    r = fake.openai.chat.completions.with_raw_response.create(model="fake-model", messages=USER,
                                                              extra_body={"vendor_extra": True})
    assert r.headers["x-hearth-ignored-fields"] == "vendor_extra"



@pytest.mark.parametrize("body", [{"logprobs": 10}, {"logprobs": 10, "echo": True}],  # echo: prompt_logprobs too
                         ids=["logprobs", "echo"])
@pytest.mark.parametrize("stream", [False, True])
def test_more_top_logprobs_than_the_vocabulary_holds_names_the_field(make_fake, body, stream):
    """The engine's check (check_request: more failed its runner's step), in the route's names."""
    fake = make_fake(engine=FakeEngine(vocab_size=8))
    r = fake.client.post(COMPLETIONS, json={"prompt": [1, 2], **body, "stream": stream})  # ids the 8 hold
    assert r.status_code == 400 and r.json()["error"]["param"] == "logprobs", r.text
    assert r.json()["error"]["message"] == "logprobs: must be at most the vocabulary's size (8), got 10"
    assert not fake.engine.live


def test_the_engines_logprobs_check_in_chat_names_top_logprobs():
    """Chat's k is top_logprobs (a chat prompt's template holds characters past a vocabulary under 20,
    the only one where the route's own [0, 20] lets this through: mapped, not posted)."""
    e = InvalidSamplingParams("logprobs", "must be at most the vocabulary's size (8), got 10")
    err = from_hearth_error(e, CHAT)
    assert (err.status, err.param, err.message) == (400, "top_logprobs", "top_logprobs: must be at most "
                                                    "the vocabulary's size (8), got 10")


def test_the_field_of_a_sampling_error_is_its_own_attribute_not_the_message_s_first_word():
    """The structured-output check's message opened with "structured output ...": split at its first
    space, the 400 named a field `structured`."""
    import pickle

    from hearth.sampling_params import StructuredOutput

    with pytest.raises(InvalidSamplingParams) as e:
        StructuredOutput()
    err = from_hearth_error(e.value, COMPLETIONS)
    assert (err.status, err.param) == (400, "structured_output") and err.message.startswith("structured_output: needs")
    again = pickle.loads(pickle.dumps(e.value))  # a cluster replica's error crosses processes
    assert (again.field, again.why, str(again)) == (e.value.field, e.value.why, str(e.value))


@pytest.mark.parametrize("fmt", [{"type": "json_object"},
                                 {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}])
def test_response_format_and_a_forced_call_are_one_rule_one_message(fake, fmt):
    """guided()'s check of two constraints answers it (the chat route had its own copy, worded apart)."""
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    r = fake.client.post(CHAT, json={"messages": USER, "tools": [tool], "tool_choice": "required", "response_format": fmt})
    assert r.status_code == 400 and r.json()["error"]["param"] == "response_format"
    assert r.json()["error"]["message"] == "response_format: cannot be combined with tool_choice (one constraint per request)"
    assert not fake.engine.added


@pytest.mark.parametrize("method,path,words", [
    ("POST", "/v1/images/generations", "hearth runs text models only"),
    ("POST", "/v1/audio/transcriptions", "hearth runs text models only"),
    ("POST", "/api/pulls", "not one of the Ollama routes hearth serves"),
])
def test_another_servers_route_says_hearth_has_none(fake, method, path, words):
    """A client moved from vLLM, llama-server or Ollama got a bare 'no route', as for a typo."""
    r = fake.client.request(method, path, json={})
    assert r.status_code == 404
    error = r.json()["error"]
    message = error if path.startswith("/api/") else error["message"]  # Ollama's one-string error there
    assert message.startswith(f"no route {method} {path}: ") and words in message, message


def test_an_unknown_route_is_a_bare_404(fake):
    r = fake.client.post("/v1/chat/completion", json={})
    assert r.status_code == 404 and r.json()["error"]["message"] == "no route POST /v1/chat/completion"
