"""The server's default sampling (hearth serve --temp 0.3 --top-k 20 ..., vLLM's --override-generation-config) is
what a request that does not give a field samples with, on every generating route; a request's own value wins."""

from __future__ import annotations

import pytest

USER = [{"role": "user", "content": "hi"}]
ROUTES = {  # route -> (a body giving no sampling field, the same giving temperature 0.9)
    "/v1/chat/completions": {"model": "fake-model", "messages": USER},
    "/v1/completions": {"model": "fake-model", "prompt": "hi"},
    "/v1/responses": {"model": "fake-model", "input": "hi"},
    "/v1/messages": {"model": "fake-model", "max_tokens": 4, "messages": USER},
    "/completion": {"prompt": "hi", "n_predict": 4},
    "/api/chat": {"model": "fake-model", "messages": USER, "stream": False},
    "/api/generate": {"model": "fake-model", "prompt": "hi", "stream": False},
}
DEFAULTS = {"temperature": 0.3, "top_p": 0.8, "top_k": 20, "min_p": 0.05, "repetition_penalty": 1.05,
            "presence_penalty": 1.5, "frequency_penalty": 0.5}


def _own(route: str, body: dict) -> dict:
    return {**body, "options": {"temperature": 0.9}} if route.startswith("/api/") else {**body, "temperature": 0.9}


@pytest.mark.parametrize("route", ROUTES)
def test_the_server_s_defaults_apply_where_a_request_gives_none(make_fake, route):
    fake = make_fake(sampling_defaults=DEFAULTS)
    r = fake.client.post(route, json=ROUTES[route])
    assert r.status_code == 200, r.text
    assert {k: getattr(fake.last.params, k) for k in DEFAULTS} == DEFAULTS
    r = fake.client.post(route, json=_own(route, ROUTES[route]))
    assert r.status_code == 200, r.text
    assert fake.last.params.temperature == 0.9 and fake.last.params.top_k == 20  # its own wins, the rest default


def test_without_defaults_llama_server_s_route_keeps_its_own(fake):
    fake.client.post("/completion", json=ROUTES["/completion"])
    assert fake.last.params.temperature == 0.8 and fake.last.params.top_k == 40
    fake.client.post("/v1/chat/completions", json=ROUTES["/v1/chat/completions"])
    assert fake.last.params.temperature == 1.0 and fake.last.params.top_k == 0


def test_props_shows_the_server_s_defaults(make_fake):
    """llama-server's /props: default_generation_settings are what a /completion without the fields samples with."""
    params = make_fake(sampling_defaults=DEFAULTS).client.get("/props").json()["default_generation_settings"]["params"]
    assert params["temperature"] == 0.3 and params["top_k"] == 20 and params["repeat_penalty"] == 1.05


def test_a_completion_s_generation_settings_show_what_it_sampled_with(make_fake):
    fake = make_fake(sampling_defaults=DEFAULTS)
    settings = fake.client.post("/completion", json={**ROUTES["/completion"], "top_k": 5}).json()["generation_settings"]
    assert (settings["temperature"], settings["top_k"], settings["repeat_penalty"]) == (0.3, 5, 1.05)
