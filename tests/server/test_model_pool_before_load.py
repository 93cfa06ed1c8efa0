"""A bad request is refused before its model loads (hearth.api.sampling.check_before_load): an asked token limit
past the model's context (ModelSpec.max_model_len, from its file's header), n past the server's limit or a sampler
field out of its range is a 400 with nothing loaded and nothing unloaded. Before: the model loaded first, unloading
another under --max-memory (seconds each way) just to answer 400."""

from __future__ import annotations

import pytest

from tests.server.test_model_pool import USER, loaded, pool_of, serve  # noqa: F401  (serve: the fixture)

TOO_MANY = 10**9
BAD = [
    ("/v1/chat/completions", {"messages": USER, "max_tokens": TOO_MANY}, "max_tokens"),
    ("/v1/chat/completions", {"messages": USER, "max_completion_tokens": 5000}, "max_completion_tokens"),
    ("/v1/chat/completions", {"messages": USER, "n": 100}, "n"),
    ("/v1/responses", {"input": "hi", "max_output_tokens": TOO_MANY}, "max_output_tokens"),
    ("/v1/messages", {"messages": USER, "max_tokens": TOO_MANY}, "max_tokens"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": TOO_MANY}, "max_tokens"),
    ("/v1/completions", {"prompt": "hi", "n": 100}, "n"),
    ("/v1/chat/completions", {"messages": USER, "temperature": -1}, "temperature"),
    ("/v1/chat/completions", {"messages": USER, "max_tokens": 8, "min_tokens": 9}, "min_tokens"),
    ("/v1/chat/completions", {"messages": USER, "stop": [""]}, "stop"),
    ("/v1/chat/completions", {"messages": USER, "top_logprobs": 2}, "top_logprobs"),
    ("/v1/responses", {"input": "hi", "top_p": 2}, "top_p"),
    ("/v1/messages", {"messages": USER, "max_tokens": 8, "stop_sequences": [""]}, "stop_sequences"),
    ("/v1/completions", {"prompt": "hi", "presence_penalty": 5}, "presence_penalty"),
    ("/api/chat", {"messages": USER, "options": {"temperature": -1}}, "options.temperature"),
    ("/api/generate", {"prompt": "hi", "options": {"top_p": 2}}, "options.top_p"),
    ("/completion", {"prompt": "hi", "n_predict": TOO_MANY}, "n_predict"),
    ("/completion", {"prompt": "hi", "dry_base": 0.5}, "dry_base"),
    ("/infill", {"input_prefix": "a", "input_suffix": "b", "temperature": -1}, "temperature"),
    ("/infill", {"input_prefix": "a", "input_suffix": "b", "n_predict": TOO_MANY}, "n_predict"),
]


@pytest.mark.parametrize("path,body,param", BAD, ids=[f"{p}-{f}" for p, _, f in BAD])
def test_a_bad_request_is_refused_before_its_model_loads(serve, path, body, param):
    pool, loader = pool_of(("a", 1), ("b", 1), budget_gib=1)  # room for one model
    client = serve(pool)
    assert client.post("/v1/chat/completions", json={"model": "a", "messages": USER}).status_code == 200
    r = client.post(path, json={**body, "model": "b"})
    assert r.status_code == 400, r.text
    assert param in r.text
    assert loader.loads == ["a"] and loaded(client) == {"a": True, "b": False}


def test_ollama_s_num_predict_past_the_context_is_still_no_400(serve):
    """Ollama reads a num_predict past the context as "until the context is full" (within_context): the check
    before the load keeps that."""
    pool, loader = pool_of(("a", 1))
    client = serve(pool)
    r = client.post("/api/chat", json={"model": "a", "messages": USER, "stream": False,
                                       "options": {"num_predict": TOO_MANY}})
    assert r.status_code == 200, r.text


def test_a_loaded_model_s_own_context_bounds_it(serve):
    """Once loaded, the engine's context (not the spec's) is the bound: here the fake engine's 4096 tokens."""
    pool, loader = pool_of(("a", 1))
    client = serve(pool)
    ok = client.post("/v1/chat/completions", json={"model": "a", "messages": USER, "max_tokens": 8})
    assert ok.status_code == 200
    r = client.post("/v1/chat/completions", json={"model": "a", "messages": USER, "max_tokens": 4097})
    assert r.status_code == 400 and "4096" in r.json()["error"]["message"]
