"""llama-server's own field names on OpenAI's routes, as its /v1 handlers read them: n_predict is max_tokens
(-1: no limit; Responses' max_output_tokens), repeat_penalty is repetition_penalty; never named as ignored; both spellings given and
different is a 400 naming llama-server's."""

from __future__ import annotations

import pytest

USER = [{"role": "user", "content": "hi"}]
ROUTES = {"/v1/chat/completions": {"model": "fake-model", "messages": USER},
          "/v1/completions": {"model": "fake-model", "prompt": "hi"},
          "/v1/responses": {"model": "fake-model", "input": "hi"}}  # n_predict was ignored there, and ran on
LIMIT = {"/v1/chat/completions": "max_tokens", "/v1/completions": "max_tokens", "/v1/responses": "max_output_tokens"}
"""Each route's own spelling of n_predict."""


@pytest.mark.parametrize("route", ROUTES)
def test_n_predict_and_repeat_penalty_reach_the_engine(fake, route):
    r = fake.client.post(route, json={**ROUTES[route], "n_predict": 4, "repeat_penalty": 1.3})
    assert r.status_code == 200, r.text
    assert fake.last.params.max_tokens == 4
    assert fake.last.params.repetition_penalty == 1.3
    ignored = r.headers.get("x-hearth-ignored-fields", "")
    assert "n_predict" not in ignored and "repeat_penalty" not in ignored


@pytest.mark.parametrize("route", ROUTES)
def test_n_predict_minus_one_is_no_limit(fake, route):
    r = fake.client.post(route, json={**ROUTES[route], "n_predict": -1})
    assert r.status_code == 200, r.text
    assert fake.last.params.max_tokens is None  # not completions' default 16


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("extra, field", [({"LIMIT": 8, "n_predict": 4}, "n_predict"),
                                          ({"repetition_penalty": 1.1, "repeat_penalty": 1.3}, "repeat_penalty")])
def test_both_spellings_disagreeing_is_a_400(fake, route, extra, field):
    extra = {LIMIT[route] if k == "LIMIT" else k: v for k, v in extra.items()}
    r = fake.client.post(route, json={**ROUTES[route], **extra})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == field and field in r.json()["error"]["message"]


@pytest.mark.parametrize("route", ROUTES)
def test_both_spellings_agreeing_run(fake, route):
    r = fake.client.post(route, json={**ROUTES[route], LIMIT[route]: 4, "n_predict": 4,
                                      "repetition_penalty": 1.2, "repeat_penalty": 1.2})
    assert r.status_code == 200, r.text
    assert fake.last.params.max_tokens == 4 and fake.last.params.repetition_penalty == 1.2


@pytest.mark.parametrize("route", ROUTES)
def test_a_null_spelling_is_not_given(fake, route):
    r = fake.client.post(route, json={**ROUTES[route], LIMIT[route]: None, "n_predict": 4})
    assert r.status_code == 200, r.text
    assert fake.last.params.max_tokens == 4


def test_chat_max_completion_tokens_disagreeing(fake):
    r = fake.client.post("/v1/chat/completions", json={**ROUTES["/v1/chat/completions"],
                                                       "max_completion_tokens": 8, "n_predict": 4})
    assert r.status_code == 400 and "max_completion_tokens" in r.json()["error"]["message"], r.text


@pytest.mark.parametrize("route", ROUTES)
def test_an_n_predict_past_the_context_is_named(fake, route):
    r = fake.client.post(route, json={**ROUTES[route], "n_predict": 10 ** 7})
    assert r.status_code == 400 and r.json()["error"]["param"] == "n_predict", r.text
