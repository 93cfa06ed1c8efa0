"""Lists of token ids in a request: stop_token_ids and a completions prompt of ids are checked against
the vocabulary (a 400 naming the field, as logit_bias already was), and a prompt of none of the four
shapes says which they are."""

from __future__ import annotations

import pytest

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
USER = [{"role": "user", "content": "hi"}]
VOCAB = 0x110000  # the fake tokenizer's: one token a character


def _error(fake, path, body) -> dict:
    r = fake.client.post(path, json={"max_tokens": 2, **body})
    assert r.status_code == 400, r.text
    return r.json()["error"]


@pytest.mark.parametrize("path,body", [(CHAT, {"messages": USER}), (COMPLETIONS, {"prompt": "hi"})])
@pytest.mark.parametrize("bad", [VOCAB, 99999999, -1])
def test_stop_token_ids_outside_the_vocabulary_are_a_400_naming_the_field(fake, path, body, bad):
    error = _error(fake, path, {**body, "stop_token_ids": [5, bad]})
    assert error["param"] == "stop_token_ids"
    assert error["message"] == f"stop_token_ids: token id {bad} is outside the vocabulary (0..{VOCAB - 1})"


def test_stop_token_ids_in_the_vocabulary_pass(fake):
    r = fake.client.post(COMPLETIONS, json={"prompt": "script:hello", "stop_token_ids": [0, VOCAB - 1]})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("prompt,message", [
    ([1, 2, 99999999], f"prompt: token id 99999999 is outside the vocabulary (0..{VOCAB - 1})"),
    ([1, -2], f"prompt: token id -2 is outside the vocabulary (0..{VOCAB - 1})"),
    ([[]], "prompt: must not be empty"),
    ([[1, 2], []], "prompt[1]: must not be empty"),
    ([[1], [VOCAB]], f"prompt[1]: token id {VOCAB} is outside the vocabulary (0..{VOCAB - 1})"),
])
def test_a_prompt_of_bad_token_ids_is_a_400_naming_prompt(fake, prompt, message):
    error = _error(fake, COMPLETIONS, {"prompt": prompt})
    assert error["param"] == "prompt" and error["message"] == message


@pytest.mark.parametrize("prompt", [5, {"text": "x"}, [1, "a"], ["a", 1], [[1], "a"], [[1, "a"]], [True], [1.5]])
def test_a_prompt_of_no_known_shape_names_the_four(fake, prompt):
    error = _error(fake, COMPLETIONS, {"prompt": prompt})
    assert error["param"] == "prompt"
    assert error["message"] == ("prompt: must be a string, a list of strings, a list of token ids "
                                "or a list of lists of token ids")


@pytest.mark.parametrize("prompt", ["script:hello", ["script:hello", "hi"], [104, 105], [[104], [105, 106]]])
def test_the_four_shapes_pass(fake, prompt):
    r = fake.client.post(COMPLETIONS, json={"prompt": prompt, "max_tokens": 2})
    assert r.status_code == 200, r.text
