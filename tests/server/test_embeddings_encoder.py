"""An encoder GGUF (tiny bert, [CLS] pooling) served: /v1/embeddings through the OpenAI SDK and
/api/embed through the ollama client, each vector the model's own pooled output for the input alone,
a batch larger than the engine holds in waves; text routes answer a 400 that says it is an embedding
model; and `hearth serve tiny-bert.gguf` itself, as a user starts it."""

from __future__ import annotations

import asyncio

import httpx
import ollama
import openai
import pytest
import torch
from starlette.testclient import TestClient

from hearth.api.app import create_app
from hearth.api.served import ServedModel
from hearth.engine.async_engine import AsyncEngine
from hearth.llm import LLM
from hearth.models.encoder import pooled
from tests.bert_factory import write_tiny_encoder
from tests.server.conftest import launch, stop

ATOL = 1e-5
TEXTS = ["the capital of france is paris", "hello world", "search query: embedding model", "un", "it is",
         "the document", "café"]
TEXT_ROUTES = [  # (path, body): each asks for text
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stream": True}),
    ("/v1/completions", {"prompt": "hi"}),
    ("/api/chat", {"messages": [{"role": "user", "content": "hi"}]}),
    ("/api/generate", {"prompt": "hi", "stream": False}),
]


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("bert") / "tiny-bert.gguf"
    write_tiny_encoder(p, "bert", pooling_type=2)  # cls, as bge's
    return p


@pytest.fixture(scope="module")
def served(model_file):
    llm = LLM(str(model_file), max_num_seqs=2, max_num_batched_tokens=32, progress=False)
    return ServedModel.from_llm(llm, ["tiny-bert"], AsyncEngine(llm.engine, max_queued=1))


@pytest.fixture(scope="module")
def client(served):
    with TestClient(create_app(served)) as c:
        yield c


def reference(served, text: str) -> list[float]:
    """The input alone through the model, pooled as its file says and normalized."""
    ids = served.encode_text(text)
    n = torch.tensor([len(ids)])
    with torch.inference_mode():
        return pooled(served.owner.model(torch.tensor([ids]), n), n, ["cls"])[0].tolist()


def test_openai_embeddings_in_waves(client, served):
    assert served.pooling == "cls" and served.embedding_size == 64
    sdk = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=client, max_retries=0)
    r = sdk.embeddings.create(model="tiny-bert", input=TEXTS)  # 7 inputs, the engine holds 3 at once
    assert [d.index for d in r.data] == list(range(len(TEXTS)))
    for text, d in zip(TEXTS, r.data):
        assert list(d.embedding) == pytest.approx(reference(served, text), abs=ATOL)
    assert r.usage.prompt_tokens == sum(len(served.encode_text(t)) for t in TEXTS)


def test_ollama_embed(client, served):
    sdk = ollama.AsyncClient(host="http://testserver", transport=httpx.ASGITransport(client.app))
    r = asyncio.run(sdk.embed(model="tiny-bert", input=TEXTS[:3]))
    for text, v in zip(TEXTS, r.embeddings):
        assert list(v) == pytest.approx(reference(served, text), abs=ATOL)


@pytest.mark.parametrize("path, body", TEXT_ROUTES, ids=[f"{p}{'-stream' if b.get('stream') else ''}" for p, b in TEXT_ROUTES])
def test_text_routes_are_a_400_naming_an_embedding_model(client, path, body):
    r = client.post(path, json={"model": "tiny-bert", **body})
    assert r.status_code == 400, r.text
    assert "is an embedding model" in r.text and "/v1/embeddings" in r.text


def test_hearth_serve_an_encoder_gguf(model_file, tmp_path):
    proc, server = launch(model_file, tmp_path / "server.log", name=None)
    try:
        with server.http() as http:
            r = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 400 and "is an embedding model" in r.json()["error"]["message"], r.text
            r = http.post("/v1/embeddings", json={"input": ["hello world", "paris"]})
            assert r.status_code == 200, r.text
            vectors = [d["embedding"] for d in r.json()["data"]]
            assert len(vectors) == 2 and all(abs(sum(x * x for x in v) - 1) < 1e-4 for v in vectors)
            ollama_vector = http.post("/api/embed", json={"input": "hello world"}).json()["embeddings"][0]
            assert ollama_vector == pytest.approx(vectors[0], abs=ATOL)
    finally:
        stop(proc)


def test_the_whole_context_is_the_inputs(client, served):
    """An encoder computes no token past its input: 64 tokens fit a 64-token context, 65 are a 400."""
    assert served.max_model_len == 64
    ok = client.post("/v1/embeddings", json={"model": "tiny-bert", "input": [[101] * 64]})
    assert ok.status_code == 200, ok.text
    r = client.post("/v1/embeddings", json={"model": "tiny-bert", "input": [[101] * 65]})
    assert r.status_code == 400 and "more than the context holds for one (64)" in r.text, r.text


def test_ollama_show_says_embedding(client):
    assert client.post("/api/show", json={"model": "tiny-bert"}).json()["capabilities"] == ["embedding"]
