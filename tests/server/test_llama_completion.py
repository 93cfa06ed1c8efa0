"""POST /completion (llama-server's native endpoint, Tabby's and Continue's llama.cpp backends) on a real
tiny model, in process: the prompt as text or token ids runs the same tokens as /v1/completions' (the
same greedy answer), llama-server's reply shape whole and streamed (no [DONE]), `stop` as one string,
n_predict 0, and bad prompts as a 400 naming `prompt`."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from hearth.api.app import create_app
from hearth.api.served import ServedModel
from hearth.engine.async_engine import AsyncEngine
from hearth.llm import LLM
from tests.gguf_factory import write_tiny_gguf

CONTEXT = 128
PROMPT = "the capital of france is"
GREEDY = {"temperature": 0.0, "n_predict": 6}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "tiny.gguf"
    write_tiny_gguf(path, "qwen2", context=1024, tied=False)
    llm = LLM(str(path), max_model_len=CONTEXT, max_num_batched_tokens=64, progress=False)
    with TestClient(create_app(ServedModel.from_llm(llm, ["tiny"], AsyncEngine(llm.engine)))) as c:
        yield c


def test_text_and_token_ids_answer_as_v1_completions(client):
    ref = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 6, "temperature": 0}).json()
    ids = client.post("/tokenize", json={"prompt": PROMPT}).json()["tokens"]
    for prompt in (PROMPT, ids):
        r = client.post("/completion", json={"prompt": prompt, "return_tokens": True, **GREEDY})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["content"] == ref["choices"][0]["text"] != "" and body["stop"] is True
        assert body["tokens_evaluated"] == ref["usage"]["prompt_tokens"] == len(ids)
        assert body["tokens_predicted"] == ref["usage"]["completion_tokens"] == len(body["tokens"])
        assert body["prompt"] == PROMPT and body["truncated"] is False and "hearth" not in body
        assert body["stop_type"] == ("limit" if body["tokens_predicted"] == 6 else "eos")
    assert client.post("/completions", json={"prompt": PROMPT, **GREEDY}).json()["content"] == body["content"]


def test_streamed_as_llama_server_without_done(client):
    whole = client.post("/completion", json={"prompt": PROMPT, **GREEDY}).json()
    with client.stream("POST", "/completion", json={"prompt": PROMPT, "stream": True, **GREEDY}) as r:
        lines = [line for line in r.iter_lines() if line]
    assert all(line.startswith("data: {") for line in lines)
    *deltas, last = [json.loads(line[6:]) for line in lines]
    assert "".join(c["content"] for c in deltas) == whole["content"] and not any(c["stop"] for c in deltas)
    assert last["stop"] is True and last["tokens_predicted"] == whole["tokens_predicted"]


def test_tabbys_request_and_stop_as_one_string(client):
    """Tabby's llama.cpp body (penalty_last_n is llama-server's and not hearth's: named, ignored)."""
    free = client.post("/completion", json={"prompt": PROMPT, **GREEDY, "n_predict": 12}).json()["content"]
    word = free.strip()[1:3]
    assert len(word) == 2, free
    r = client.post("/completion", json={"prompt": PROMPT, "n_predict": 12, "temperature": 0.0, "stream": False,
                                         "seed": 1, "penalty_last_n": 0, "presence_penalty": 0.0, "stop": word})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["stop_type"], body["stopping_word"], body["content"]) == ("word", word, free[:free.index(word)])
    assert body["generation_settings"]["stop"] == [word] and r.headers["x-hearth-ignored-fields"] == "penalty_last_n"


def test_n_predict_0_runs_the_prompt_only(client):
    body = client.post("/completion", json={"prompt": PROMPT * 3, "n_predict": 0}).json()
    assert (body["content"], body["tokens_predicted"], body["stop_type"]) == ("", 0, "limit")
    again = client.post("/completion", json={"prompt": PROMPT * 3, **GREEDY}).json()
    assert again["tokens_cached"] > 0


@pytest.mark.parametrize("prompt", ["", [], [10**9], "paris " * CONTEXT, None, 3])
def test_bad_prompts_are_a_400_naming_it(client, prompt):
    r = client.post("/completion", json={"prompt": prompt, **GREEDY})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "prompt" and error["code"] == 400  # llama-server's error shape


def test_tokenize_and_detokenize_in_llama_servers_shape(client):
    """llama-server's /tokenize {content, add_special (default false)} -> {tokens}; /detokenize -> {content}."""
    plain = client.post("/tokenize", json={"prompt": PROMPT, "add_special_tokens": False}).json()["tokens"]
    r = client.post("/tokenize", json={"content": PROMPT})
    assert r.status_code == 200 and r.json()["tokens"] == plain and "x-hearth-ignored-fields" not in r.headers
    assert client.post("/tokenize", json={"content": PROMPT, "add_special": True}).json()["tokens"] == \
        client.post("/tokenize", json={"prompt": PROMPT}).json()["tokens"]
    assert client.post("/detokenize", json={"tokens": plain}).json()["content"] == PROMPT
    r = client.post("/tokenize", json={"content": PROMPT, "prompt": PROMPT})
    assert r.status_code == 400 and r.json()["error"]["param"] == "content"


def test_a_model_that_adds_a_bos_gets_it_where_llama_server_adds_it(tmp_path):
    """SentencePiece tiny model (adds BOS): /completion's text prompt and /tokenize's add_special get the
    BOS, /tokenize's content without add_special (llama-server's default) does not."""
    path = tmp_path / "tiny-spm.gguf"
    write_tiny_gguf(path, "llama", tokenizer="llama")
    llm = LLM(str(path), max_model_len=CONTEXT, max_num_batched_tokens=64, progress=False)
    bos = llm.tokenizer.bos_id
    with TestClient(create_app(ServedModel.from_llm(llm, ["spm"], AsyncEngine(llm.engine)))) as c:
        bare = c.post("/tokenize", json={"content": PROMPT}).json()["tokens"]
        with_bos = c.post("/tokenize", json={"content": PROMPT, "add_special": True}).json()["tokens"]
        assert bare[0] != bos and with_bos == [bos, *bare]
        body = c.post("/completion", json={"prompt": PROMPT, **GREEDY}).json()
        assert body["tokens_evaluated"] == len(with_bos)


def test_props_of_a_loaded_model(client):
    """GET /props with what the loaded model really has: its file, context and slots (EngineConfig.max_num_seqs)."""
    body = client.get("/props").json()
    assert body["model_path"].endswith("tiny.gguf") and body["total_slots"] == 16
    assert body["default_generation_settings"]["n_ctx"] == CONTEXT
    assert body["default_generation_settings"]["speculative"] is False and body["chat_template"]


def test_tokenize_with_pieces_as_llama_server(client):
    """llama-server's `with_pieces`: each token as {id, piece}, bytes where its piece is not UTF-8 (it was
    ignored, named in x-hearth-ignored-fields, and the ids came bare)."""
    text = "the capital 🙂 of"
    ids = client.post("/tokenize", json={"content": text}).json()["tokens"]
    r = client.post("/tokenize", json={"content": text, "with_pieces": True})
    assert r.status_code == 200 and "x-hearth-ignored-fields" not in r.headers, r.text
    pieces = r.json()["tokens"]
    assert [p["id"] for p in pieces] == ids
    raw = b"".join(p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"]) for p in pieces)
    assert raw.decode() == text and any(isinstance(p["piece"], list) for p in pieces)  # the emoji's bytes split


TOO_WIDE = "root ::= " + " | ".join(f'"w{i}"' for i in range(2001))
"""Compiles, then llguidance's parser stops after the `w` (a row of 2,002 items; its limit is 2,000)."""


@pytest.mark.parametrize("path,body", [("/completion", {"grammar": TOO_WIDE, "n_predict": 8}),
                                       ("/v1/completions", {"guided_grammar": TOO_WIDE, "max_tokens": 8})])
def test_a_grammar_engine_that_gives_up_mid_answer_is_an_error(client, path, body):
    """Its mask then allowed only the end: the answer ended "w", invalid, as a whole one (stop)."""
    r = client.post(path, json={"prompt": PROMPT, "temperature": 0.0, **body})
    assert r.status_code == 400, r.text
    assert "the grammar engine gave up mid-answer" in r.json()["error"]["message"] and "2000" in r.text
    with client.stream("POST", path, json={"prompt": PROMPT, "temperature": 0.0, "stream": True, **body}) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    assert "gave up mid-answer" in events[-1]["error"]["message"], events
    ok = client.post(path, json={"prompt": PROMPT, "temperature": 0.0, **body, **{next(iter(body)): 'root ::= "w1"'}})
    assert ok.status_code == 200, ok.text  # the engine goes on


def test_a_mix_of_ids_and_text_is_one_prompt_and_several_texts_a_400(client):
    """llama-server's mixed prompt (`[ids..., " text", ids...]`) was a 400 'Input should be a valid string';
    its several prompts (a list of texts), which hearth does not answer, now say so."""
    ids = client.post("/tokenize", json={"content": PROMPT}).json()["tokens"]
    head = client.post("/tokenize", json={"content": "the capital"}).json()["tokens"]
    tail = PROMPT[len("the capital"):]
    whole = client.post("/completion", json={"prompt": PROMPT, **GREEDY}).json()
    for prompt in ([*head, tail], [PROMPT]):
        body = client.post("/completion", json={"prompt": prompt, **GREEDY}).json()
        assert body["content"] == whole["content"], body
    assert len(client.post("/tokenize", json={"content": tail}).json()["tokens"]) + len(head) == len(ids)
    r = client.post("/completion", json={"prompt": [PROMPT, "second"], **GREEDY})
    assert r.status_code == 400 and "2 prompts in one request" in r.json()["error"]["message"], r.text


def test_logit_bias_false_bans_a_token_on_completion(client):
    """llama-server's own /completion ignored logit_bias (named in x-hearth-ignored-fields): its pairs form is
    that route's syntax first."""
    first = client.post("/completion", json={"prompt": PROMPT, "return_tokens": True, **GREEDY}).json()["tokens"][0]
    r = client.post("/completion", json={"prompt": PROMPT, "return_tokens": True, "logit_bias": [[first, False]],
                                         **GREEDY})
    assert r.status_code == 200 and "logit_bias" not in r.headers.get("x-hearth-ignored-fields", "")
    assert r.json()["tokens"][0] != first
