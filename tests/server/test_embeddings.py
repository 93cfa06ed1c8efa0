"""POST /v1/embeddings on a real tiny model: the OpenAI SDK unmodified (its default base64 and
floats), each input's embedding the model's own final hidden states pooled and normalized (the tiny
GGUF says mean, as a gte-style embedding GGUF would), OpenAI's four input shapes, a batch larger than
the engine holds at once (in waves, in order), usage, and bad input as 400s naming the field. Ollama's
/api/embed and /api/embeddings over the same path, through the `ollama` client unmodified."""

from __future__ import annotations

import asyncio
import base64
import json

import httpx
import numpy as np
import ollama
import openai
import pytest
from starlette.testclient import TestClient

from hearth.api.app import create_app
from hearth.api.served import ServedModel
from hearth.engine.async_engine import AsyncEngine
from hearth.llm import LLM
from tests.engine.test_embeddings import hidden_of, unit
from tests.gguf_factory import write_tiny_gguf

ATOL = 1e-4
"""Chunked prefill against one prefill of the same f32 model."""
TEXTS = ["the capital of france is paris", "the capital of spain is madrid", "a b c"]


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("tiny") / "tiny-llama.gguf"
    write_tiny_gguf(p, "llama", pooling_type=1)  # mean
    return p


@pytest.fixture(scope="module")
def served(model_file):
    llm = LLM(str(model_file), max_model_len=128, max_num_seqs=2, max_num_batched_tokens=16, progress=False)
    return ServedModel.from_llm(llm, ["tiny"], AsyncEngine(llm.engine, max_queued=1))


@pytest.fixture(scope="module")
def client(served):
    with TestClient(create_app(served)) as c:
        yield c


@pytest.fixture(scope="module")
def reference(model_file):
    """Token ids -> the normalized mean of the model's hidden states, from a model of its own."""
    llm = LLM(str(model_file), max_model_len=128, progress=False)
    return lambda ids: unit(hidden_of(llm, ids).mean(0))


def _ids(served, text: str) -> list[int]:
    return served.encode_text(text)


def test_openai_sdk_floats_and_base64(client, served, reference):
    sdk = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=client, max_retries=0)
    for fmt in ({}, {"encoding_format": "float"}, {"encoding_format": "base64"}):
        # unless told, the SDK asks for base64 and decodes it; told base64, it hands the string on
        r = sdk.embeddings.create(model="tiny", input=TEXTS, **fmt)
        assert [d.index for d in r.data] == [0, 1, 2]
        for text, d in zip(TEXTS, r.data):
            got = d.embedding if fmt != {"encoding_format": "base64"} else np.frombuffer(base64.b64decode(d.embedding), "<f4")
            assert list(got) == pytest.approx(reference(_ids(served, text)), abs=ATOL)
        assert r.usage.prompt_tokens == r.usage.total_tokens == sum(len(_ids(served, t)) for t in TEXTS)


def test_four_input_shapes_and_waves(client, served, reference):
    ids = _ids(served, TEXTS[0])
    one = client.post("/v1/embeddings", json={"model": "tiny", "input": ids}).json()["data"]
    assert len(one) == 1 and one[0]["embedding"] == pytest.approx(reference(ids), abs=ATOL)
    # 7 inputs where the engine holds 3 at once (2 running + 1 queued): in waves, in order
    batch = [ids[:k] for k in range(2, 9)]
    r = client.post("/v1/embeddings", json={"model": "tiny", "input": batch})
    assert r.status_code == 200, r.text
    got = r.json()["data"]
    assert [d["index"] for d in got] == list(range(7))
    for b, d in zip(batch, got):
        assert d["embedding"] == pytest.approx(reference(b), abs=ATOL)


@pytest.mark.parametrize("body, param, message", [
    ({"input": ""}, "input", "input[0]: must not be empty"),
    ({"input": []}, "input", "input: must not be empty"),
    ({"input": ["ok", [1, 2]]}, "input", "input: must be a string, a list of strings"),
    ({"input": [[5, 6], [100000]]}, "input", "input[1]: token id 100000 is outside the vocabulary"),
    ({"input": "word " * 200}, "input", 'more than the context holds for one (127); shorten it or send "truncate_prompt_tokens": -1'),
    ({"input": "x", "truncate_prompt_tokens": 0}, "truncate_prompt_tokens", "must be -1 or 1 to 127"),
    ({"input": "x", "truncate_prompt_tokens": 128}, "truncate_prompt_tokens", "must be -1 or 1 to 127"),
    ({"input": "x", "dimensions": 3}, "dimensions", "this model's embeddings have 64 dimensions"),
    ({"input": "x", "encoding_format": "hex"}, "encoding_format", "encoding_format"),
])
def test_bad_input_names_the_field(client, body, param, message):
    r = client.post("/v1/embeddings", json={"model": "tiny", **body})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and message in error["message"], json.dumps(error)


def test_truncate_prompt_tokens_keeps_the_last_tokens(client, served, reference):
    """vLLM's truncate_prompt_tokens on /v1/embeddings: an input past k tokens keeps its last k (-1: the room)."""
    long = "word " * 100 + "the end"
    ids = _ids(served, long)
    for k, kept in ((-1, ids[-127:]), (20, ids[-20:])):
        r = client.post("/v1/embeddings", json={"model": "tiny", "input": long, "truncate_prompt_tokens": k}).json()
        assert r["usage"]["prompt_tokens"] == len(kept)
        assert r["data"][0]["embedding"] == pytest.approx(reference(kept), abs=ATOL)


def test_ollama_embed_routes(client, served, reference):
    ids = [_ids(served, t) for t in TEXTS]
    sdk = ollama.AsyncClient(host="http://testserver", transport=httpx.ASGITransport(client.app))
    r = asyncio.run(sdk.embed(model="tiny:latest", input=TEXTS))  # the ollama client, unmodified
    assert r.model == "tiny:latest" and r.prompt_eval_count == sum(map(len, ids))
    for i, v in zip(ids, r.embeddings):
        assert list(v) == pytest.approx(reference(i), abs=ATOL)
    old = client.post("/api/embeddings", json={"model": "tiny", "prompt": TEXTS[0]}).json()
    assert old["embedding"] == pytest.approx(reference(ids[0]), abs=ATOL)


def test_ollama_embed_truncates_only_when_asked(client, served, reference):
    long = "word " * 200
    r = client.post("/api/embed", json={"model": "tiny", "input": long})
    assert r.status_code == 400 and r.json()["error"].startswith("input[0]: ") and r.json()["error"].endswith("; shorten it or send \"truncate\": true")
    cut = client.post("/api/embed", json={"model": "tiny", "input": long, "truncate": True}).json()
    assert cut["prompt_eval_count"] == 127
    assert cut["embeddings"][0] == pytest.approx(reference(_ids(served, long)[:127]), abs=ATOL)
    r = client.post("/api/embed", json={"model": "tiny", "input": "x", "dimensions": 5})
    assert r.status_code == 400 and r.json()["error"].startswith("dimensions"), r.text
    r = client.post("/api/embeddings", json={"model": "tiny", "prompt": long})
    assert r.status_code == 400 and r.json()["error"].startswith("prompt: "), r.text


def test_ollama_embed_without_text_loads_the_model(client):
    """Ollama answers an embed request with no text (a preload) with no vectors, not an error."""
    for body in ({}, {"input": ""}, {"input": []}):
        r = client.post("/api/embed", json={"model": "tiny", **body})
        assert r.status_code == 200 and r.json()["embeddings"] == [], r.text
    assert client.post("/api/embeddings", json={"model": "tiny", "prompt": ""}).json() == {"embedding": []}


def test_concurrent_batches_share_the_room(client, served, reference):
    """Three 7-input batches at once where the engine holds 3 requests: each waits for room as the
    others' waves finish, none is a 429, every vector is its input's."""
    batch = [_ids(served, TEXTS[0])[:k] for k in range(2, 9)]

    async def send():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(client.app), base_url="http://t") as c:
            return await asyncio.gather(*(c.post("/v1/embeddings", json={"model": "tiny", "input": batch})
                                          for _ in range(3)))

    for r in asyncio.run(send()):
        assert r.status_code == 200, r.text
        for b, d in zip(batch, r.json()["data"]):
            assert d["embedding"] == pytest.approx(reference(b), abs=ATOL)
