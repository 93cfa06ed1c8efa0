"""A reranker GGUF (tiny random bert, pooling_type 4) served in process: the rerank routes in
llama-server's, Jina's / Cohere's, vLLM's and TEI's shapes and vLLM's score routes, each score the model's own
logit for the pair alone (through a sigmoid unless use_activation is false), sorted, top_n, documents as
strings or {"text"}; a batch larger than the engine holds in waves; bad input a 400 in OpenAI's shape
naming the field; a rerank to a model that is no reranker and an embedding from a reranker a 400 naming
the model and why. No real reranker GGUF is reachable here: the tiny random file is the reference."""

from __future__ import annotations

import math

import pytest
import torch
from starlette.testclient import TestClient

from hearth.api.app import create_app
from hearth.api.served import ServedModel
from hearth.engine.async_engine import AsyncEngine
from hearth.engine.pairs import pair_prompt
from hearth.llm import LLM
from hearth.models.encoder import scores
from tests.bert_factory import write_tiny_encoder

ATOL = 1e-5
QUERY = "the capital of france"
DOCS = ["hello world", "paris is the capital of france", "an embedding model", "it is 42", "café", "the document"]
RERANK_PATHS = ["/rerank", "/v1/rerank", "/v2/rerank", "/reranking", "/v1/reranking"]


def served_model(path, name: str) -> ServedModel:
    llm = LLM(str(path), max_num_seqs=2, max_num_batched_tokens=40, progress=False)
    return ServedModel.from_llm(llm, [name], AsyncEngine(llm.engine, max_queued=1))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    p = tmp_path_factory.mktemp("rerank") / "tiny-rerank.gguf"
    write_tiny_encoder(p, "bert", pooling_type=4)
    return served_model(p, "tiny-rerank")


@pytest.fixture(scope="module")
def client(served):
    with TestClient(create_app(served)) as c:
        yield c


@pytest.fixture(scope="module")
def embedder(tmp_path_factory):
    p = tmp_path_factory.mktemp("bert") / "tiny-bert.gguf"
    write_tiny_encoder(p, "bert", pooling_type=2)
    with TestClient(create_app(served_model(p, "tiny-bert"))) as c:
        yield c


def logit(served, a: str, b: str) -> float:
    """The pair alone through the model and its head."""
    ids, start = pair_prompt(served.tokenizer, a, b)
    model = served.owner.model
    with torch.inference_mode():
        return scores(model(torch.tensor([ids]), torch.tensor([len(ids)]), torch.tensor([start])), model.head)[0].item()


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


@pytest.mark.parametrize("path", RERANK_PATHS)
def test_rerank_sorts_the_documents_by_the_models_score(client, served, path):
    r = client.post(path, json={"model": "tiny-rerank", "query": QUERY, "documents": DOCS})  # 6 pairs, 3 at once
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "tiny-rerank" and body["object"] == "list"
    want = {i: sigmoid(logit(served, QUERY, d)) for i, d in enumerate(DOCS)}
    got = body["results"]
    assert sorted(x["index"] for x in got) == list(range(len(DOCS)))
    assert [x["relevance_score"] for x in got] == sorted((x["relevance_score"] for x in got), reverse=True)
    for x in got:
        assert x["relevance_score"] == pytest.approx(want[x["index"]], abs=ATOL)
        assert x["document"] == {"text": DOCS[x["index"]]}
    tokens = sum(len(pair_prompt(served.tokenizer, QUERY, d)[0]) for d in DOCS)
    assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}


def test_llama_server_and_cohere_options(client, served):
    """top_n, documents as {"text"}, return_documents false (Cohere), use_activation false (llama-server's logit)."""
    docs = [{"text": d} for d in DOCS[:4]]
    r = client.post("/v1/rerank", json={"query": QUERY, "documents": docs, "top_n": 2, "return_documents": False,
                                        "use_activation": False})
    assert r.status_code == 200, r.text
    got = r.json()["results"]
    logits = sorted(((logit(served, QUERY, d), i) for i, d in enumerate(DOCS[:4])), reverse=True)[:2]
    assert [x["index"] for x in got] == [i for _, i in logits]
    assert [x["relevance_score"] for x in got] == pytest.approx([x for x, _ in logits], abs=ATOL)
    assert all(set(x) == {"index", "relevance_score"} for x in got)


def test_tei_form(client, served):
    """A body with `texts` (Hugging Face TEI's, which llama-server takes on its rerank routes): a bare list
    of {index, score}, raw_scores for the logit, return_text, truncate."""
    r = client.post("/rerank", json={"query": QUERY, "texts": DOCS[:3], "raw_scores": True, "return_text": True})
    assert r.status_code == 200, r.text
    want = sorted(((logit(served, QUERY, d), i) for i, d in enumerate(DOCS[:3])), reverse=True)
    assert [x["index"] for x in r.json()] == [i for _, i in want]
    assert [x["score"] for x in r.json()] == pytest.approx([x for x, _ in want], abs=ATOL)
    assert [x["text"] for x in r.json()] == [DOCS[i] for _, i in want]
    r = client.post("/rerank", json={"query": QUERY, "texts": [LONG], "truncate": True})
    assert r.status_code == 200 and set(r.json()[0]) == {"index", "score"}, r.text
    r = client.post("/rerank", json={"query": QUERY, "texts": ["a"], "documents": ["b"]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "texts", r.text


@pytest.mark.parametrize("path", ["/score", "/v1/score"])
def test_score_pairs_in_order(client, served, path):
    r = client.post(path, json={"model": "tiny-rerank", "text_1": QUERY, "text_2": DOCS[:3]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [d["index"] for d in body["data"]] == [0, 1, 2] and all(d["object"] == "score" for d in body["data"])
    assert [d["score"] for d in body["data"]] == pytest.approx([sigmoid(logit(served, QUERY, d)) for d in DOCS[:3]],
                                                                abs=ATOL)
    zipped = client.post(path, json={"text_1": DOCS[:2], "text_2": DOCS[2:4], "use_activation": False}).json()
    assert [d["score"] for d in zipped["data"]] == pytest.approx([logit(served, DOCS[0], DOCS[2]),
                                                                   logit(served, DOCS[1], DOCS[3])], abs=ATOL)
    one = client.post(path, json={"text_1": QUERY, "text_2": DOCS[0]}).json()
    assert one["data"][0]["score"] == pytest.approx(sigmoid(logit(served, QUERY, DOCS[0])), abs=ATOL)


@pytest.mark.parametrize("first, second", [("queries", "documents"), ("queries", "items"), ("data_1", "data_2")])
def test_score_takes_vllms_other_names_for_the_pair(client, served, first, second):
    """vLLM's ScoreRequest is a union of four forms of one pair; each scores as text_1 and text_2 do, and its
    errors name its own fields."""
    r = client.post("/v1/score", json={first: QUERY, second: DOCS[:2], "use_activation": False})
    assert r.status_code == 200, r.text
    assert [d["score"] for d in r.json()["data"]] == pytest.approx([logit(served, QUERY, d) for d in DOCS[:2]],
                                                                    abs=ATOL)
    r = client.post("/v1/score", json={first: QUERY, second: ["a", ""]})
    assert r.status_code == 400 and r.json()["error"]["param"] == second, r.text
    assert f"{second}[1]: must not be empty" in r.json()["error"]["message"], r.text


@pytest.mark.parametrize("body", [{"text_1": "a", "text_2": "b", "queries": "a", "documents": "b"},
                                  {"queries": "a", "documents": "b", "items": "c"}, {"text_1": "a", "data_2": "b"},
                                  {"queries": "a"}])
def test_score_refuses_a_mix_of_forms_naming_the_fields(client, body):
    r = client.post("/v1/score", json=body)
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert all(name in message.split(":")[1] for name in body) and "give the pair as one of" in message, message


LONG = " ".join(["paris"] * 80)  # the tiny context holds 64 tokens
BAD = [  # (path, body, status, param, words)
    ("/v1/rerank", {"query": QUERY, "documents": []}, 400, "documents", "documents: must not be empty"),
    ("/v1/rerank", {"query": "", "documents": ["a"]}, 400, "query", "query: must not be empty"),
    ("/v1/rerank", {"query": QUERY, "documents": ["a", ""]}, 400, "documents", "documents[1]: must not be empty"),
    ("/v1/rerank", {"query": QUERY, "documents": ["a", LONG]}, 400, "documents",
     "documents[1]: the pair with its query is 87 tokens, more than the context holds for one (64)"),
    ("/v1/rerank", {"query": QUERY, "documents": ["a"], "truncate_prompt_tokens": 65}, 400, "truncate_prompt_tokens",
     "truncate_prompt_tokens: must be -1 or 1 to 64"),
    ("/v1/rerank", {"query": LONG, "documents": ["a"], "truncate_prompt_tokens": -1}, 400, "documents",
     "documents[0]: its query takes 82 tokens, which leaves no document token within 64"),
    ("/v1/rerank", {"query": 3, "documents": ["a"]}, 400, "query", "query"),
    ("/v1/rerank", {"query": QUERY, "documents": "a"}, 400, "documents", "documents"),
    ("/v1/rerank", {"query": QUERY, "documents": [1]}, 400, "documents[0]", "documents[0]"),
    ("/v1/rerank", {"query": QUERY, "documents": ["a"], "top_n": -1}, 400, "top_n", "top_n: must be 0"),
    ("/v1/rerank", {"query": QUERY, "documents": ["a"], "top_n": "2"}, 400, "top_n", "top_n"),
    ("/v1/score", {"text_1": [], "text_2": ["a"]}, 400, "text_1", "text_1: must not be empty"),
    ("/v1/score", {"text_1": ["a", "b"], "text_2": ["a", "b", "c"]}, 400, "text_2",
     "text_2: text_1 has 2 texts and text_2 3"),
    ("/v1/score", {"text_1": "a", "text_2": [LONG]}, 400, "text_2", "text_2[0]: the pair with its query is 84 tokens"),
]


@pytest.mark.parametrize("path, body, status, param, words", BAD, ids=[w[:40] for *_, w in BAD])
def test_bad_input_is_a_400_naming_the_field(client, path, body, status, param, words):
    r = client.post(path, json=body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param and words in error["message"], error


def test_truncate_prompt_tokens_cuts_the_document(client, served):
    r = client.post("/v1/rerank", json={"query": QUERY, "documents": [LONG], "truncate_prompt_tokens": -1,
                                        "use_activation": False})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == 64
    cut = " ".join(["paris"] * (64 - 7))  # [CLS] 4 query tokens [SEP] ... [SEP]
    assert r.json()["results"][0]["relevance_score"] == pytest.approx(logit(served, QUERY, cut), abs=ATOL)


def test_cohere_rank_fields_read_the_named_fields_in_order(client, served):
    """Cohere v1's rank_fields: an object document is read as its fields' `key: value` lines in rank_fields'
    order (a missing one skipped, a number as JSON), and comes back whole; it was ignored, and an object
    without `text` refused."""
    docs = [{"title": "paris", "body": "is the capital of france", "id": 7},
            {"body": "an embedding model", "year": 2024}, "it is 42"]
    texts = ["body: is the capital of france\ntitle: paris", "body: an embedding model\nyear: 2024", "it is 42"]
    r = client.post("/v1/rerank", json={"query": QUERY, "documents": docs, "rank_fields": ["body", "title", "year"],
                                        "use_activation": False})
    assert r.status_code == 200, r.text
    assert "rank_fields" not in r.headers.get("x-hearth-ignored-fields", "")
    for x in r.json()["results"]:
        assert x["relevance_score"] == pytest.approx(logit(served, QUERY, texts[x["index"]]), abs=ATOL)
        assert x["document"] == (docs[x["index"]] if x["index"] < 2 else {"text": "it is 42"})
    for body, words in (({"documents": [{"title": "paris"}]}, "documents[0]: an object document needs a string `text`"),
                        ({"documents": [{"title": "paris"}], "rank_fields": ["body"]}, "documents[0]: has none of"),
                        ({"documents": ["a"], "rank_fields": []}, "rank_fields: give the names")):
        r = client.post("/v1/rerank", json={"query": QUERY, **body})
        assert r.status_code == 400 and words in r.json()["error"]["message"], r.text


def test_cohere_max_tokens_per_doc_cuts_each_document(client, served):
    """Cohere v2's max_tokens_per_doc: each document's first N tokens are scored (it was ignored: a long one was
    a 400, a shorter one scored whole)."""
    r = client.post("/v2/rerank", json={"query": QUERY, "documents": [LONG, "paris is the capital"],
                                        "max_tokens_per_doc": 3, "use_activation": False})
    assert r.status_code == 200, r.text
    assert "max_tokens_per_doc" not in r.headers.get("x-hearth-ignored-fields", "")
    got = {x["index"]: x["relevance_score"] for x in r.json()["results"]}
    assert got[0] == pytest.approx(logit(served, QUERY, "paris paris paris"), abs=ATOL)
    assert got[1] == pytest.approx(logit(served, QUERY, "paris is the"), abs=ATOL)
    assert r.json()["usage"]["prompt_tokens"] == 2 * (7 + 3)  # [CLS] 4 query tokens [SEP], 3, [SEP]
    r = client.post("/v2/rerank", json={"query": QUERY, "documents": ["a"], "max_tokens_per_doc": 0})
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens_per_doc"


def test_a_reranker_serves_no_embeddings_nor_text(client):
    for path, body in (("/v1/embeddings", {"input": "hello"}), ("/api/embed", {"input": "hello"})):
        r = client.post(path, json={"model": "tiny-rerank", **body})
        assert r.status_code == 400 and "'tiny-rerank' is a reranker" in r.text and "/v1/rerank" in r.text, r.text
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400 and "is a reranker: it scores query-document pairs" in r.text, r.text


def test_rerank_on_a_model_that_is_no_reranker_names_it(embedder, fake):
    for c, name, kind in ((embedder, "tiny-bert", "an embedding model"),
                          (fake.client, None, "a text generation model")):
        for path, body in (("/v1/rerank", {"query": "q", "documents": ["d"]}),
                           ("/v1/score", {"text_1": "q", "text_2": "d"})):
            r = c.post(path, json={"model": name, **body} if name else body)
            assert r.status_code == 400, r.text
            error = r.json()["error"]
            assert error["param"] == "model" and f"is not a reranker ({kind})" in error["message"], error


def test_hearth_serve_a_reranker_with_llama_servers_flag(served, tmp_path):
    """`hearth serve tiny-rerank.gguf --reranking`, as a llama-server user starts it."""
    from tests.server.conftest import launch, stop

    proc, server = launch(served.path, tmp_path / "server.log", "--reranking", name=None)
    try:
        with server.http() as http:
            r = http.post("/rerank", json={"query": QUERY, "documents": DOCS[:2], "top_n": 1})
            assert r.status_code == 200 and len(r.json()["results"]) == 1, r.text
            best = max(range(2), key=lambda i: logit(served, QUERY, DOCS[i]))
            assert r.json()["results"][0]["index"] == best
    finally:
        stop(proc)


def test_reranking_flag_refuses_a_model_that_is_no_reranker(tmp_path, capsys):
    from hearth.cli import main as cli_main

    path = tmp_path / "tiny-bert.gguf"
    write_tiny_encoder(path, "bert")
    assert cli_main(["serve", str(path), "--reranking"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("hearth: error: --reranking: MODEL") and "is not a reranker" in err[-1], err


BAD_DECODER_RERANKERS = {  # case -> (arch, rank_rows, serve's flags, its error)
    # Qwen3-Reranker converted without its head: nothing to score the yes/no with
    "qwen3, no cls.output": ("qwen3", (), ["--reranking"], r"qwen3 with pooling_type 4 \(rank\) has no cls.output.weight"),
    # three labels: the first one's probability is no relevance
    "qwen3, 3 labels": ("qwen3", (5, 6, 7), [], r"cls.output.weight has 3 rows \(3 labels named: \['yes', 'no', "
                                            r"'maybe'\]\); hearth scores a decoder reranker with 2 labels"),
    # llama.cpp builds cls.output for qwen3 and qwen3vl alone
    "llama": ("llama", (5, 6), [], r"a decoder reranker \(llama with pooling_type 4, rank\) is not supported; "
                               r"hearth reranks with qwen3, qwen3vl decoders"),
}


@pytest.mark.parametrize("case", BAD_DECODER_RERANKERS)
def test_a_decoder_reranker_hearth_cannot_score_is_refused_at_start(tmp_path, capsys, case):
    """A decoder GGUF with pooling_type 4 whose head hearth cannot score (hearth.models.rank_head): one line at
    start, from the header, with --reranking or without; never a chat model that /v1/rerank calls no reranker."""
    import re

    from hearth.cli import main as cli_main
    from tests.gguf_factory import write_tiny_gguf

    arch, rows, flags, why = BAD_DECODER_RERANKERS[case]
    path = tmp_path / f"tiny-{arch}-rerank.gguf"
    write_tiny_gguf(path, arch, pooling_type=4, rank_rows=rows)
    assert cli_main(["serve", str(path), *flags]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("hearth: error: MODEL") and re.search(why, err[-1]), err
    assert "Traceback" not in "\n".join(err)


def test_ollama_lists_no_embedding_capability_for_a_reranker(tmp_path):
    """/api/embed refuses a reranker, so /api/show lists no "embedding" for it, from its file's header before
    it loads and once loaded."""
    from hearth.cli import command_parser
    from hearth.commands.serve import server_config
    from hearth.commands.serve_models import build_pool
    from tests.gguf_factory import write_tiny_gguf

    write_tiny_gguf(tmp_path / "chat.gguf", "llama")
    write_tiny_encoder(tmp_path / "rerank.gguf", "bert", pooling_type=4)
    args = command_parser("serve").parse_intermixed_args([str(tmp_path / "chat.gguf"), str(tmp_path / "rerank.gguf")])
    pool = build_pool(args)
    with TestClient(create_app(pool, server_config(args))) as c:
        assert c.post("/api/show", json={"model": "rerank"}).json()["capabilities"] == []
        assert c.post("/v1/rerank", json={"model": "rerank", "query": "q", "documents": ["d"]}).status_code == 200
        assert pool.slots[1].served is not None
        assert c.post("/api/show", json={"model": "rerank"}).json()["capabilities"] == []
