"""A bad request is refused before its model loads (hearth.api.sampling.check_before_load): an asked token limit
past the model's context (ModelSpec.max_model_len, from its file's header), n past the server's limit or a sampler
field out of its range is a 400 with nothing loaded and nothing unloaded. Before: the model loaded first, unloading
another under --max-memory (seconds each way) just to answer 400."""

from __future__ import annotations

import json

import pytest

from hearth.api.model_pool import ModelPool
from hearth.api.model_spec import ModelSpec
from hearth.api.served import FileFacts
from tests.server.test_model_pool import USER, FakeLoader, loaded, pool_of, serve  # noqa: F401  (serve: the fixture)

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


def _facts(pooling: str = "last", embeds_only: bool = False) -> FileFacts:
    """A header's facts as `hearth serve` reads them before a load: 100 tokens, 64-wide hidden states."""
    return FileFacts("m.gguf", {}, 0, "", 0, "", embeds_only, pooling, vocab_size=100, embedding_size=64)


def _pool(budget_gib: int = 1) -> tuple[ModelPool, FakeLoader]:
    """a and b: text models (a loaded first; b with two LoRA adapters); r: a reranker; room for one model."""
    loader = FakeLoader()
    spec = [ModelSpec([n], 1 << 30, max_model_len=4096, facts=_facts(*p), lora_count=k) for n, p, k in
            (("a", (), 0), ("b", (), 2), ("r", ("rank", True), 0))]
    return ModelPool(spec, loader, budget_gib << 30), loader


NOT_A_RERANKER = {"query": "q", "documents": ["d"]}
OTHER = [  # (path, body, model, status, param): bodies are POSTed; a model that would have to load for it first
    ("/v1/embeddings", {"input": ""}, "b", 400, "input"),
    ("/v1/embeddings", {"input": []}, "b", 400, "input"),
    ("/v1/embeddings", {"input": [[]]}, "b", 400, "input"),
    ("/v1/embeddings", {"input": ["x", "\ud800"]}, "b", 400, "input"),
    ("/v1/embeddings", {"input": [5, 100]}, "b", 400, "input"),  # the header's vocabulary: 100 tokens
    ("/v1/embeddings", {"input": [1] * 5000}, "b", 400, "input"),  # past the 4096-token context
    ("/v1/embeddings", {"input": "x", "dimensions": 7}, "b", 400, "dimensions"),
    ("/v1/embeddings", {"input": "x", "truncate_prompt_tokens": 0}, "b", 400, "truncate_prompt_tokens"),
    ("/v1/embeddings", {"input": "x", "encoding_format": "bogus"}, "b", 400, "encoding_format"),
    ("/v1/embeddings", {"input": "x"}, "r", 400, "model"),  # a reranker's
    ("/v1/embeddings", {"input": "x"}, "nope", 404, "model"),
    ("/embedding", {"content": [[]]}, "b", 400, "content"),
    ("/embedding", {"input": "x"}, "r", 400, "model"),
    ("/api/embed", {"input": ["x", ""]}, "b", 400, "input"),
    ("/api/embed", {"input": "x", "dimensions": 7}, "b", 400, "dimensions"),
    ("/api/embed", {"input": "x"}, "r", 400, "model"),
    ("/api/embeddings", {"prompt": "\ud800"}, "b", 400, "prompt"),
    ("/api/embeddings", {"prompt": "x"}, "r", 400, "model"),
    ("/v1/rerank", {"query": "q", "documents": []}, "r", 400, "documents"),
    ("/v1/rerank", {"query": "", "documents": ["d"]}, "r", 400, "query"),
    ("/v1/rerank", {**NOT_A_RERANKER, "top_n": -1}, "r", 400, "top_n"),
    ("/v1/rerank", {**NOT_A_RERANKER, "max_tokens_per_doc": 0}, "r", 400, "max_tokens_per_doc"),
    ("/v1/rerank", {**NOT_A_RERANKER, "texts": ["d"]}, "r", 400, "texts"),
    ("/v1/rerank", {**NOT_A_RERANKER, "truncate_prompt_tokens": 0}, "r", 400, "truncate_prompt_tokens"),
    ("/v1/rerank", {"query": "q", "documents": [{"title": "d"}]}, "r", 400, "documents"),
    ("/v1/rerank", NOT_A_RERANKER, "b", 400, "model"),
    ("/v1/score", {"text_1": "", "text_2": "d"}, "r", 400, "text_1"),
    ("/v1/score", {"text_1": ["q", "q"], "text_2": ["a", "b", "c"]}, "r", 400, "text_2"),
    ("/v1/score", {"text_1": "q", "text_2": "d", "truncate_prompt_tokens": 5000}, "r", 400, "truncate_prompt_tokens"),
    ("/tokenize", {"content": "x", "prompt": "y"}, "b", 400, "content"),
    ("/tokenize", {}, "b", 400, "content"),
    ("/tokenize", {"prompt": "x", "messages": USER}, "b", 400, "prompt"),
    ("/detokenize", {"tokens": [-1]}, "b", 400, "tokens"),
    ("/detokenize", {"tokens": [100]}, "b", 400, "tokens"),
    ("/slots/save", {"name": "../x"}, "b", 400, "name"),
    ("/slots/save", {}, "b", 400, "name"),
    ("/slots/save", {"name": "x", "prompt": "y", "messages": USER}, "b", 400, "prompt"),
    ("/slots/restore", {"filename": "a/b"}, "b", 400, "filename"),
    ("/v1/chat/completions", {"messages": USER, "lora": [{"id": 2, "scale": 1.0}]}, "b", 400, "lora"),
    ("/completion", {"prompt": "x", "lora": [{"id": 0, "scale": 1.0}]}, "r", 400, "lora"),  # r has none
]


@pytest.mark.parametrize("path,body,model,status,param", OTHER,
                         ids=[f"{p}-{m}-{f}-{i}" for i, (p, _, m, _, f) in enumerate(OTHER)])
def test_a_bad_request_to_any_route_is_refused_before_its_model_loads(serve, path, body, model, status, param):
    """Embeddings, rerank/score, tokenize/detokenize and slots too: what needs no loaded model (the body's shape,
    the header's vocabulary, context, pooling and width) is checked first."""
    pool, loader = _pool()
    client = serve(pool)
    assert client.post("/v1/chat/completions", json={"model": "a", "messages": USER}).status_code == 200
    # as the SDKs send JSON (ASCII, a lone surrogate escaped): httpx's json= cannot encode one
    r = client.post(path, content=json.dumps({**body, "model": model}), headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    assert param in r.text
    assert loader.loads == ["a"] and loaded(client) == {"a": True, "b": False, "r": False}


@pytest.mark.parametrize("path", ["/props", "/slots", "/lora-adapters"])
def test_a_get_route_s_unknown_model_is_a_404_with_nothing_loaded(serve, path):
    pool, loader = _pool()
    client = serve(pool)
    r = client.get(path, params={"model": "nope"})
    assert r.status_code == 404 and "nope" in r.text
    assert loader.loads == []


@pytest.mark.parametrize("model,ids", [("b", [2]), ("r", [0])])
def test_lora_adapters_s_bad_ids_are_refused_before_the_model_loads(serve, model, ids):
    """POST /lora-adapters?model=: the server's flags say each model's adapters (b: two, r: none)."""
    pool, loader = _pool()
    client = serve(pool)
    r = client.post("/lora-adapters", params={"model": model}, json=[{"id": j, "scale": 1.0} for j in ids])
    assert r.status_code == 400 and r.json()["error"]["param"] in ("lora", "lora-adapters"), r.text
    assert loader.loads == []
