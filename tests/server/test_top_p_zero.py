"""top_p 0 is accepted on every route that takes top_p (OpenAI documents 0..1; llama-server and Ollama take 0:
the most likely token alone, hearth.sample.sampler); it was a 400 "must be in (0, 1]". Past 1 stays a 400."""

from __future__ import annotations

import pytest

USER = [{"role": "user", "content": "hi"}]
ROUTES = {  # route -> (body with top_p 0, the field a 400 names)
    "/v1/chat/completions": ({"model": "fake-model", "messages": USER, "top_p": 0}, "top_p"),
    "/v1/completions": ({"model": "fake-model", "prompt": "hi", "top_p": 0}, "top_p"),
    "/v1/messages": ({"model": "fake-model", "max_tokens": 4, "messages": USER, "top_p": 0}, "top_p"),
    "/completion": ({"prompt": "hi", "n_predict": 4, "top_p": 0}, "top_p"),
    "/api/chat": ({"model": "fake-model", "messages": USER, "stream": False, "options": {"top_p": 0}}, "options.top_p"),
    "/api/generate": ({"model": "fake-model", "prompt": "hi", "stream": False, "options": {"top_p": 0}},
                      "options.top_p"),
}


@pytest.mark.parametrize("route", ROUTES)
def test_top_p_0_is_taken(fake, route):
    body, field = ROUTES[route]
    r = fake.client.post(route, json=body)
    assert r.status_code == 200, r.text
    assert fake.last.params.top_p == 0
    bad = {**body, "options": {"top_p": 1.5}} if "options" in body else {**body, "top_p": 1.5}
    r = fake.client.post(route, json=bad)
    assert r.status_code == 400 and field in r.text and "[0, 1]" in r.text, r.text
