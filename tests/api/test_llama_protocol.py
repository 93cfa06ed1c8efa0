"""llama-server's request options as /infill and /completion read them (hearth.api.llama_protocol)."""

from __future__ import annotations

import pytest

from hearth.api.llama_protocol import LlamaOptions
from hearth.api.llama_reply import answer_room


@pytest.mark.parametrize("body,limit", [
    ({}, None), ({"n_predict": 7}, 7), ({"max_tokens": 5}, 5), ({"n_predict": 7, "max_tokens": 5}, 7),
    ({"n_predict": None, "max_tokens": 5}, 5),  # null is not given: the alias counts (llama-server's json_value)
    ({"n_predict": -1}, None), ({"n_predict": -7, "max_tokens": 5}, None), ({"n_predict": 0}, 0),
])
def test_the_answer_limit(body, limit):
    assert LlamaOptions(**body).limit() == limit


@pytest.mark.parametrize("body,read", [
    ({}, -1), ({"n_predict": -7}, -7), ({"max_tokens": -3}, -3), ({"n_predict": None, "max_tokens": 5}, 5),
    ({"n_predict": 0, "max_tokens": 5}, 0),
])
def test_n_predict_as_llama_server_reads_and_echoes_it(body, read):
    assert LlamaOptions(**body).n_predict_read() == read


def test_a_prompt_only_request_leaves_room_for_the_token_the_engine_computes_and_no_limit_none():
    assert answer_room(LlamaOptions(n_predict=0)) == 1
    assert answer_room(LlamaOptions(n_predict=-2)) is None


@pytest.mark.parametrize("stop,kept", [("", []), (["", "\n"], ["\n"]), ("END", ["END"])])
def test_empty_stop_words_are_skipped_as_llama_server_skips_them(stop, kept):
    assert LlamaOptions(stop=stop).stop == kept
