"""`NAME:latest` names NAME on every route, as /api/tags lists it and Ollama's OpenAI routes take it: the pool
resolves the tag (hearth.api.model_pool), not each route. It was a 404 on /v1/chat/completions."""

from __future__ import annotations

import pytest

USER = [{"role": "user", "content": "hi"}]
NAME = "qwen2.5-coder-0.5b:latest"
ROUTES = {
    "/v1/chat/completions": {"model": NAME, "messages": USER},
    "/v1/completions": {"model": NAME, "prompt": "hi"},
    "/v1/messages": {"model": NAME, "max_tokens": 4, "messages": USER},
    "/v1/responses": {"model": NAME, "input": "hi"},
    "/api/chat": {"model": NAME, "messages": USER, "stream": False},
}


@pytest.mark.parametrize("route", ROUTES)
def test_the_latest_tag_names_the_model(make_fake, route):
    fake = make_fake(names=("qwen2.5-coder-0.5b", "other"))
    r = fake.client.post(route, json=ROUTES[route])
    assert r.status_code == 200, r.text


def test_models_route_and_an_unknown_tagged_name(make_fake):
    fake = make_fake(names=("qwen2.5-coder-0.5b",))
    assert fake.client.get(f"/v1/models/{NAME}").status_code == 200
    r = fake.client.post("/v1/chat/completions", json={"model": "nope:latest", "messages": USER})
    assert r.status_code == 404 and "'nope:latest'" in r.json()["error"]["message"], r.text
    r = fake.client.post("/v1/chat/completions", json={"model": "qwen2.5-coder-0.5b:q8", "messages": USER})
    assert r.status_code == 404, r.text  # only Ollama's default tag
