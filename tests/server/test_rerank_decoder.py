"""A tiny Qwen3-Reranker GGUF (tests/qwen3_reranker.py) served in process: the rerank routes in llama-server's,
Cohere's and TEI's shapes and vLLM's score route answer llama.cpp's score for each document, p(yes) from the
softmax of the yes and no logits of its prompt's last token (transformers on the same file and prompt), sorted;
chat and embeddings from it are a 400 saying it is a reranker."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from hearth.api.app import create_app
from hearth.api.served import ServedModel
from hearth.engine.async_engine import AsyncEngine
from hearth.engine.pairs import pair_prompts
from hearth.llm import LLM
from tests.qwen3_reranker import DOCS, QUERY, reference, write_reranker

P_ATOL = 2e-3  # hearth's CPU kernels vs transformers' f32 (tests/test_llm_rerank_decoder.py)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen3-rerank") / "tiny-qwen3-rerank.gguf"
    dims = write_reranker(path)
    llm = LLM(str(path), max_num_seqs=2, max_num_batched_tokens=64, progress=False)
    served = ServedModel.from_llm(llm, ["tiny-qwen3-rerank"], AsyncEngine(llm.engine, max_queued=1))
    prompts, _ = pair_prompts(llm.tokenizer, [(QUERY, d) for d in DOCS], None, llm.max_model_len - 1)
    yield served, [p for p, _ in reference(path, dims, prompts)]
    llm.close()


@pytest.fixture(scope="module")
def client(served):
    with TestClient(create_app(served[0])) as c:
        yield c


@pytest.mark.parametrize("path", ["/v1/rerank", "/rerank"])
def test_rerank_answers_llamacpps_scores_sorted(client, served, path):
    want = served[1]
    r = client.post(path, json={"model": "tiny-qwen3-rerank", "query": QUERY, "documents": DOCS, "top_n": 4})
    assert r.status_code == 200, r.text
    got = r.json()["results"]
    assert [x["index"] for x in got] == sorted(range(len(DOCS)), key=lambda i: -want[i])[:4]
    for x in got:
        assert x["relevance_score"] == pytest.approx(want[x["index"]], abs=P_ATOL)
        assert x["document"] == {"text": DOCS[x["index"]]}


def test_score_and_tei_shapes(client, served):
    want = served[1]
    r = client.post("/v1/score", json={"text_1": QUERY, "text_2": DOCS})
    assert r.status_code == 200, r.text
    assert [x["score"] for x in r.json()["data"]] == pytest.approx(want, abs=P_ATOL)
    r = client.post("/rerank", json={"query": QUERY, "texts": DOCS[:2]})  # TEI's: a bare list
    assert r.status_code == 200, r.text
    assert {x["index"]: x["score"] for x in r.json()} == pytest.approx(dict(enumerate(want[:2])), abs=P_ATOL)


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/embeddings", {"input": "hi"}),
])
def test_chat_and_embeddings_from_it_are_a_400(client, path, body):
    r = client.post(path, json={"model": "tiny-qwen3-rerank", **body})
    assert r.status_code == 400, r.text
    assert "is a reranker: it scores query-document pairs" in r.json()["error"]["message"]


def test_ollama_lists_no_capability_for_it(client):
    """Not Ollama's "completion" and "tools" (its chat is a 400), nor "embedding": a reranker's `[]`."""
    r = client.post("/api/show", json={"model": "tiny-qwen3-rerank"})
    assert r.status_code == 200, r.text
    assert r.json()["capabilities"] == []
