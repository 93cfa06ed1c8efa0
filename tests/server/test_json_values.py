"""Values Python's JSON reader takes but JSON has not (NaN, Infinity, 1e400, a lone surrogate) are a 400 naming the
field that holds them, in the route's error shape (hearth.api.json_values). Each of these was a 500: the value was
echoed into the answer (a Responses body's metadata, /completion's stop, a model name in an error), whose own JSON
then failed to encode."""

from __future__ import annotations

import json

import pytest

from hearth.api.json_values import bad_value

USER = [{"role": "user", "content": "hi"}]
# (route, body with a "VALUE" placeholder, the field named); the placeholder is replaced by raw JSON text
CASES = [
    ("/v1/responses", {"model": "fake-model", "input": "hi", "metadata": {"a": "VALUE"}}, "metadata.a"),
    ("/v1/responses", {"model": "fake-model", "input": "hi", "user": "VALUE"}, "user"),
    ("/v1/responses", {"model": "fake-model", "input": "hi", "reasoning": {"effort": "VALUE"}}, "reasoning.effort"),
    ("/completion", {"prompt": "hi", "stop": ["x", "VALUE"]}, "stop[1]"),
    ("/completion", {"prompt": "hi", "dry_sequence_breakers": ["VALUE"]}, "dry_sequence_breakers[0]"),
    ("/api/chat", {"model": "VALUE", "messages": USER, "stream": False}, "model"),
    ("/api/show", {"model": "VALUE"}, "model"),
    ("/v1/messages", {"model": "fake-model", "max_tokens": 4, "messages": [
        *USER, {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "VALUE", "content": "ok"}]}]},
     "messages[2].content[0].tool_use_id"),
    ("/v1/chat/completions", {"model": "fake-model", "messages": USER, "temperature": "VALUE"}, "temperature"),
]
VALUES = {'"\\ud800"': "holds a lone UTF-16 surrogate (\\ud800", "NaN": "must be a finite number, got nan",
          "1e400": "must be a finite number, got inf", "-Infinity": "must be a finite number, got -inf"}


def post(fake, route, body, value):
    return fake.client.post(route, content=json.dumps(body).replace('"VALUE"', value),
                            headers={"content-type": "application/json"})


def message_of(route, r) -> str:
    body = r.json()
    if route.startswith("/api/"):
        return body["error"]
    if route == "/v1/messages":
        assert body["type"] == "error", body
    return body["error"]["message"]


@pytest.mark.parametrize("route,body,field", CASES, ids=[c[2] for c in CASES])
@pytest.mark.parametrize("value", VALUES)
def test_a_value_json_has_not_is_a_400_naming_its_field(fake, route, body, field, value):
    r = post(fake, route, body, value)
    assert r.status_code == 400, r.text
    assert message_of(route, r).startswith(f"{field}: {VALUES[value]}"), r.text
    if route.startswith("/v1/") and route != "/v1/messages":
        assert r.json()["error"]["param"] == field


def test_a_stream_is_answered_alike(fake):
    body = {"model": "fake-model", "messages": USER, "stream": True, "stop": "VALUE"}
    r = post(fake, "/v1/chat/completions", body, '"\\udc00"')
    assert r.status_code == 400 and r.json()["error"]["param"] == "stop", r.text


@pytest.mark.parametrize("text", ["NaN and Infinity", "\\\\ud800 is six characters", "\U0001F600", "1e400", "9" * 400])
def test_text_that_only_looks_like_one_is_served(fake, text):
    """The bytes match the quick check; the parsed body holds none: served as before."""
    r = fake.client.post("/v1/chat/completions", json={"model": "fake-model", "messages": [
        {"role": "user", "content": text}], "max_tokens": 4})
    assert r.status_code == 200, r.text


def test_a_key_and_a_nested_list_are_named():
    assert bad_value({"a": [1, {"b": [0.5, float("inf")]}]}) == ("a[1].b[1]", "must be a finite number, got inf")
    assert bad_value({"x": {"\ud800": 1}})[0] == "x" and "a key holds a lone" in bad_value({"x": {"\ud800": 1}})[1]
    assert bad_value(float("nan")) == ("", "must be a finite number, got nan")
    assert bad_value({"a": ["\U0001F600", 1e308, -0.0, None, True]}) is None


def test_an_integer_past_python_s_digit_limit_is_named(fake):
    """FastAPI's answer was "There was an error parsing the body", naming neither the field nor the cause."""
    r = post(fake, "/v1/chat/completions", {"model": "fake-model", "messages": USER, "top_k": "VALUE"}, "9" * 5000)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"] == "top_k: is an integer of 5000 digits; this server reads at most 4300"
