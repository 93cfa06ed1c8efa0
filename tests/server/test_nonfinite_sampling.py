"""NaN and Infinity (which Python's json reads) in a float sampling field are a 400 that names them, alike on every
route: OpenAI's and Anthropic's said "Input should be less than or equal to 2" of a NaN temperature."""

from __future__ import annotations

import json

import pytest

USER = [{"role": "user", "content": "hi"}]
ROUTES = {  # route -> (a valid body, its float sampling fields by the route's names)
    "/v1/chat/completions": ({"model": "fake-model", "messages": USER},
                             ("temperature", "top_p", "min_p", "typical_p", "presence_penalty", "frequency_penalty",
                              "repetition_penalty", "repeat_penalty")),
    "/v1/completions": ({"model": "fake-model", "prompt": "hi"}, ("temperature", "top_p", "presence_penalty")),
    "/v1/responses": ({"model": "fake-model", "input": "hi"}, ("temperature", "top_p")),
    "/v1/messages": ({"model": "fake-model", "max_tokens": 4, "messages": USER},
                     ("temperature", "top_p", "min_p", "typical_p", "presence_penalty", "frequency_penalty",
                      "repetition_penalty")),
    "/completion": ({"prompt": "hi", "n_predict": 4}, ("temperature", "top_p", "min_p", "repeat_penalty")),
    "/api/chat": ({"model": "fake-model", "messages": USER, "stream": False}, ("temperature", "top_p", "repeat_penalty")),
}
CASES = [(route, name, value) for route, (_, names) in ROUTES.items() for name in names
         for value in ("NaN", "Infinity", "-Infinity")]


@pytest.mark.parametrize("route,name,value", CASES, ids=lambda v: str(v))
def test_a_non_finite_sampling_field_is_named(fake, route, name, value):
    body = dict(ROUTES[route][0])
    if route.startswith("/api/"):
        body["options"], name = {name: "VALUE"}, f"options.{name}"
    else:
        body[name] = "VALUE"
    r = fake.client.post(route, content=json.dumps(body).replace('"VALUE"', value),
                         headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    got = {"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}[value]
    message = r.json()["error"] if route.startswith("/api/") else r.json()["error"]["message"]
    assert f"{name}: must be a finite number, got {got}" in message, message
