"""llama-server's native POST /embedding (and /embeddings): `content` or `input` as a text, ids or a list,
`embd_normalize` as llama.cpp's common_embd_normalize, the reply a bare list of {index, embedding: [[row]]};
it was a 404 pointing at /v1/embeddings, so a script written against `llama-server --embedding` broke."""

from __future__ import annotations

import numpy as np
import pytest
from starlette.testclient import TestClient

from hearth.api.app import create_app
from hearth.api.served import ServedModel
from hearth.engine.async_engine import AsyncEngine
from hearth.llm import LLM
from tests.bert_factory import write_tiny_encoder
from tests.test_bad_input import assert_one_line_error, run_cli

TEXTS = ["the capital of france is paris", "hello world"]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    p = tmp_path_factory.mktemp("bert") / "tiny-bert.gguf"
    write_tiny_encoder(p, "bert", pooling_type=1)  # mean
    llm = LLM(str(p), max_num_seqs=2, max_num_batched_tokens=32, progress=False)
    with TestClient(create_app(ServedModel.from_llm(llm, ["tiny-bert"], AsyncEngine(llm.engine)))) as c:
        yield c


def openai_vectors(client, value) -> list[np.ndarray]:
    return [np.array(d["embedding"]) for d in client.post("/v1/embeddings", json={"input": value}).json()["data"]]


def common_embd_normalize(v: np.ndarray, p: int) -> np.ndarray:
    """llama.cpp's common/common.cpp, in float64."""
    if p == 0:
        return v / (np.abs(v).max() / 32760.0)  # max absolute, in int16's range
    if p == 2:
        return v / np.sqrt((v * v).sum())
    return v / (np.abs(v) ** p).sum() ** (1 / p)


@pytest.mark.parametrize("path", ["/embedding", "/embeddings"])
@pytest.mark.parametrize("field", ["content", "input"])
def test_one_text_and_a_list_answer_llama_server_s_shape(client, path, field):
    want = openai_vectors(client, TEXTS)
    r = client.post(path, json={field: TEXTS[0]})
    assert r.status_code == 200, r.text
    (only,) = r.json()
    assert set(only) == {"index", "embedding"} and only["index"] == 0 and len(only["embedding"]) == 1
    assert np.allclose(only["embedding"][0], want[0], atol=1e-6)
    got = client.post(path, json={field: TEXTS}).json()
    assert [x["index"] for x in got] == [0, 1]
    assert all(np.allclose(x["embedding"][0], w, atol=1e-6) for x, w in zip(got, want))
    ids = client.post("/tokenize", json={"content": TEXTS[1], "add_special": True}).json()["tokens"]
    got = client.post(path, json={field: ids}).json()
    assert np.allclose(got[0]["embedding"][0], want[1], atol=1e-6)


@pytest.mark.parametrize("p", [0, 1, 2, 3, 5, 1000])  # 1000: each |x| ** p of the unit vector underflowed to 0
def test_embd_normalize_is_llama_cpp_s(client, p):
    unit = openai_vectors(client, TEXTS[0])[0]
    raw = unit / np.abs(unit).max() * 1.25  # each norm is scale-free: any length gives the same answer (this one
    # keeps the reference's |x| ** 1000 within a double)
    got = np.array(client.post("/embedding", json={"content": TEXTS[0], "embd_normalize": p}).json()[0]["embedding"][0])
    assert np.allclose(got, common_embd_normalize(raw, p), rtol=1e-5, atol=1e-6)
    if p == 0:
        assert np.abs(got).max() == pytest.approx(32760.0)


@pytest.mark.parametrize("body,words", [
    ({"content": TEXTS[0], "embd_normalize": -1}, "embd_normalize: -1 (no normalization) is not supported"),
    ({"content": TEXTS[0], "embd_normalize": -2}, "embd_normalize: must be -1, 0, 1, 2"),
    ({"content": TEXTS[0], "embd_normalize": 10**400}, "embd_normalize: must be -1, 0, 1, 2"),  # no float: a 500
    ({}, '"input" or "content" must be provided'),
    ({"content": ""}, "content: must not be empty"),
    ({"content": {"text": "x"}}, "content"),
])
def test_what_it_cannot_answer_is_a_400_in_llama_server_s_shape(client, body, words):
    r = client.post("/embedding", json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == 400 and words in error["message"], error


def test_pooling_none_is_one_line(capsys, tmp_path):
    """llama-server's --pooling none gives /embedding per-token rows; hearth pools every embedding."""
    path = tmp_path / "tiny-bert.gguf"
    write_tiny_encoder(path, "bert", pooling_type=1)
    assert_one_line_error(*run_cli(capsys, "serve", str(path), "--pooling", "none"),
                          "--pooling none: hearth has no per-token embeddings")
