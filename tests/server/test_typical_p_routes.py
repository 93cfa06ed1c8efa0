"""typical_p reaches the sampler from every route that takes it (OpenAI chat, completions and Responses,
Anthropic's messages as a vLLM-style extra, llama-server's /completion, Ollama's options), never named as
ignored; out of range is a 400 naming it."""

from __future__ import annotations

import pytest

USER = [{"role": "user", "content": "hi"}]
ROUTES = {  # route -> (body with typical_p 0.4, the field a 400 names)
    "/v1/chat/completions": ({"model": "fake-model", "messages": USER, "typical_p": 0.4}, "typical_p"),
    "/v1/completions": ({"model": "fake-model", "prompt": "hi", "typical_p": 0.4}, "typical_p"),
    "/v1/responses": ({"model": "fake-model", "input": "hi", "typical_p": 0.4}, "typical_p"),
    "/v1/messages": ({"model": "fake-model", "max_tokens": 4, "messages": USER, "typical_p": 0.4}, "typical_p"),
    "/completion": ({"prompt": "hi", "n_predict": 4, "typical_p": 0.4}, "typical_p"),
    "/api/chat": ({"model": "fake-model", "messages": USER, "stream": False, "options": {"typical_p": 0.4}},
                  "options.typical_p"),
}


@pytest.mark.parametrize("route", ROUTES)
def test_typical_p_reaches_the_engine(fake, route):
    body, field = ROUTES[route]
    r = fake.client.post(route, json=body)
    assert r.status_code == 200, r.text
    assert fake.last.params.typical_p == 0.4
    assert "typical_p" not in r.headers.get("x-hearth-ignored-fields", "")
    bad = {**body, "options": {"typical_p": 1.5}} if "options" in body else {**body, "typical_p": 1.5}
    r = fake.client.post(route, json=bad)
    assert r.status_code == 400 and field in r.text, r.text


def test_unset_is_off(fake):
    fake.client.post("/completion", json={"prompt": "hi", "n_predict": 4})
    assert fake.last.params.typical_p == 1.0
    assert fake.client.get("/props").json()["default_generation_settings"]["params"]["typical_p"] == 1.0
