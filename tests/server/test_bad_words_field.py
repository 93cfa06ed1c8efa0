"""vLLM's `bad_words` on the OpenAI routes: taken (no longer named in x-hearth-ignored-fields) into the request's
SamplingParams, and anything but a list of words is a 400 naming the field (tests/sample/test_bad_words.py: the
rule; tests/test_llm_bad_words.py: a real model)."""

from __future__ import annotations

import pytest

ROUTES = [("/v1/completions", {"prompt": "hi"}),
          ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})]


@pytest.mark.parametrize("path, body", ROUTES)
def test_bad_words_reach_the_sampling_params(fake, path, body):
    r = fake.client.post(path, json={**body, "bad_words": ["Paris", "capital of"]})
    assert r.status_code == 200, r.text
    assert "x-hearth-ignored-fields" not in r.headers
    assert fake.last.params.bad_words == ["Paris", "capital of"]


@pytest.mark.parametrize("path, body", ROUTES)
@pytest.mark.parametrize("value", ["Paris", {"Paris": 1}, [1], ["Paris", ""], ["  "]])
def test_anything_but_a_list_of_words_is_a_400_naming_it(fake, path, body, value):
    r = fake.client.post(path, json={**body, "bad_words": value})
    assert r.status_code == 400, r.text
    error = r.json()["error"]  # pydantic's own for a wrong type ("bad_words[0]: ..."), SamplingParams' for the rest
    assert error["param"].startswith("bad_words") and error["message"].startswith(error["param"] + ": "), error
