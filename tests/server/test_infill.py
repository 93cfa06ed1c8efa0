"""POST /infill (llama-server's) and /v1/completions' `suffix` on a real tiny model with Qwen2.5-Coder's
FIM tokens, in process: llama-server's reply shape whole and streamed (no [DONE]), the prompt the
engine ran (its text in `prompt`, its length in `tokens_evaluated`), the same greedy answer from both
routes, what fitting the context dropped named in the reply, and bad input as a 400 naming the field
in llama-server's error shape. A model without FIM tokens (the scripted fake) is refused on both."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from hearth.api.app import create_app
from hearth.api.served import ServedModel
from hearth.engine.async_engine import AsyncEngine
from hearth.llm import LLM
from tests.gguf_factory import write_tiny_gguf
from tests.server.fakes import FakeTokenizer

CONTEXT = 256
PREFIX = "def add(a, b):\n"
SUFFIX = "\n    return c\n"
EXTRA = [{"filename": "util.py", "text": "the capital of france is paris\n"}]
GREEDY = {"temperature": 0.0, "n_predict": 6}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "tiny-fim.gguf"
    write_tiny_gguf(path, "qwen2", fim=True, context=1024, tied=False)  # untied: not an echo of FIM_MID
    llm = LLM(str(path), max_model_len=CONTEXT, max_num_batched_tokens=64, progress=False)
    return ServedModel.from_llm(llm, ["tiny-coder"], AsyncEngine(llm.engine))


@pytest.fixture(scope="module")
def client(served):
    with TestClient(create_app(served)) as c:
        yield c


def expected_prompt(extra=EXTRA, prompt="") -> str:
    files = "".join(f"<|file_sep|>{c['filename']}\n{c['text']}" for c in extra)
    return (f"<|repo_name|>myproject\n{files}<|file_sep|>filename\n<|fim_prefix|>{PREFIX}{prompt}<|fim_suffix|>"
            f"{SUFFIX}<|fim_middle|>")


def test_whole_reply_in_llama_servers_shape(client, served):
    r = client.post("/infill", json={"input_prefix": PREFIX, "input_suffix": SUFFIX, "input_extra": EXTRA,
                                     "prompt": "  ", "return_tokens": True, **GREEDY})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["stop"] is True and body["model"] == "tiny-coder" and body["index"] == 0
    assert body["prompt"] == expected_prompt(prompt="  ")
    assert body["tokens_evaluated"] == len(served.tokenizer.encode(body["prompt"], add_special_tokens=False))
    assert 1 <= body["tokens_predicted"] <= 6 and len(body["tokens"]) == body["tokens_predicted"]
    assert body["content"] and body["content"] == served.tokenizer.decode(body["tokens"], skip_special_tokens=True)
    assert body["stop_type"] == ("limit" if body["tokens_predicted"] == 6 else "eos")
    assert body["truncated"] is False and "hearth" not in body and body["stopping_word"] == ""
    assert body["timings"]["predicted_n"] == body["tokens_predicted"]
    assert body["generation_settings"]["n_predict"] == 6 and body["has_new_line"] == ("\n" in body["content"])


def test_streamed_deltas_then_a_last_chunk_and_no_done(client):
    ask = {"input_prefix": PREFIX, "input_suffix": SUFFIX, **GREEDY}
    whole = client.post("/infill", json=ask).json()
    with client.stream("POST", "/infill", json={**ask, "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert all(line.startswith("data: {") for line in lines)  # llama-server's /completion stream: no [DONE]
    chunks = [json.loads(line[6:]) for line in lines]
    *deltas, last = chunks
    assert deltas and not any(c["stop"] for c in deltas) and last["stop"] is True and last["content"] == ""
    assert "".join(c["content"] for c in deltas) == whole["content"] != ""  # greedy: the same answer both ways
    assert last["tokens_predicted"] == whole["tokens_predicted"] == deltas[-1]["tokens_predicted"]
    assert last["prompt"] == expected_prompt(extra=[])


def test_same_tokens_as_completions_with_suffix(client):
    """/v1/completions' suffix runs /infill's layout: the same greedy text, the same prompt length."""
    infill = client.post("/infill", json={"input_prefix": PREFIX, "input_suffix": SUFFIX, **GREEDY}).json()
    r = client.post("/v1/completions", json={"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 6, "temperature": 0})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["choices"][0]["text"] == infill["content"] != ""
    assert body["usage"]["prompt_tokens"] == infill["tokens_evaluated"]
    assert body["usage"]["completion_tokens"] == infill["tokens_predicted"]
    r = client.post("/v1/completions", json={"prompt": PREFIX, "suffix": SUFFIX, "echo": True})
    assert r.status_code == 400 and r.json()["error"]["param"] == "echo"


def test_what_does_not_fit_is_dropped_and_named(client, served):
    big = [{"filename": f"f{i}.py", "text": "the capital of france is paris and hello world\n" * 4} for i in range(4)]
    r = client.post("/infill", json={"input_prefix": PREFIX, "input_suffix": SUFFIX, "input_extra": big, **GREEDY})
    assert r.status_code == 200, r.text
    body = r.json()
    dropped = body["hearth"]["dropped_tokens"]
    assert body["truncated"] is True and dropped["input_extra"] > 0
    assert dropped["input_prefix"] == dropped["input_suffix"] == 0
    assert body["tokens_evaluated"] == CONTEXT - 6  # the room n_predict leaves, filled
    assert body["prompt"].endswith(expected_prompt(extra=[])[len("<|repo_name|>myproject\n"):])


def test_n_predict_0_warms_the_cache_and_answers_nothing(client):
    """llama.vim's ring_update / llama.vscode's prepare request, as sent: the prompt is computed into the
    prefix cache (the next request with the same extra context finds it cached), the reply is empty."""
    extra = [{"text": "the capital of france is paris hello world\n" * 6, "time": 1733000000.5, "filename": "consts.py"}]
    warm = {"id_slot": 0, "input_prefix": "", "input_suffix": "", "input_extra": extra, "prompt": "",
            "n_predict": 0, "temperature": 0.0, "samplers": [], "stream": False, "cache_prompt": True,
            "t_max_prompt_ms": 1, "t_max_predict_ms": 1, "response_fields": [""]}
    r = client.post("/infill", json=warm)
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["content"], body["tokens_predicted"], body["stop"], body["stop_type"]) == ("", 0, True, "limit")
    assert body["tokens_cached"] == 0 and body["timings"]["predicted_n"] == 0
    assert body["generation_settings"]["n_predict"] == 0
    with client.stream("POST", "/infill", json={**warm, "stream": True}) as s:
        chunks = [json.loads(line[6:]) for line in s.iter_lines() if line]
    assert len(chunks) == 1 and chunks[0]["stop"] is True and chunks[0]["content"] == ""
    after = client.post("/infill", json={"input_prefix": PREFIX, "input_suffix": SUFFIX, "input_extra": extra,
                                         **GREEDY}).json()
    assert after["tokens_cached"] >= body["tokens_evaluated"] - 3 - 16 > 0  # the shared head, in whole blocks


@pytest.mark.parametrize("n", [-1, -2, -7])
def test_any_negative_n_predict_is_no_limit(client, n):
    """As llama.cpp reads it: -1 (its default), -2 and the rest run to an end token or the context; the
    reply's settings echo the value given, as llama-server's (it echoed -1 for any)."""
    r = client.post("/infill", json={"input_prefix": PREFIX, "input_suffix": SUFFIX, "temperature": 0.0,
                                     "n_predict": n})
    assert r.status_code == 200, r.text
    assert r.json()["generation_settings"]["n_predict"] == n


def test_an_oversized_prefix_keeps_the_repo_header_and_counts_only_what_was_sent(client):
    big = "x = 1 + 2\n" * CONTEXT
    r = client.post("/infill", json={"input_prefix": big, "input_suffix": SUFFIX, **GREEDY})
    assert r.status_code == 200, r.text
    body = r.json()
    dropped = body["hearth"]["dropped_tokens"]
    assert dropped["input_extra"] == 0 and dropped["input_prefix"] > 0, dropped
    assert body["prompt"].startswith("<|repo_name|>myproject\n<|file_sep|>filename\n<|fim_prefix|>")
    assert body["tokens_evaluated"] == CONTEXT - 6


ERRORS = [  # (body, the field named)
    ({"input_suffix": SUFFIX}, "input_prefix"),
    ({"input_prefix": PREFIX}, "input_suffix"),
    ({"input_prefix": PREFIX, "input_suffix": 3}, "input_suffix"),
    ({"input_prefix": PREFIX, "input_suffix": SUFFIX, "input_extra": {"text": "x"}}, "input_extra"),
    ({"input_prefix": PREFIX, "input_suffix": SUFFIX, "input_extra": [{"filename": "a.py"}]}, "input_extra[0].text"),
    ({"input_prefix": PREFIX, "input_suffix": SUFFIX, "input_extra": [{"text": "x", "filename": 1}]},
     "input_extra[0].filename"),
    ({"input_prefix": PREFIX, "input_suffix": SUFFIX, "prompt": ["x"]}, "prompt"),
    ({"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": CONTEXT}, "n_predict"),
    ({"input_prefix": PREFIX, "input_suffix": SUFFIX, "temperature": "0.2"}, "temperature"),
    ({"input_prefix": PREFIX, "input_suffix": SUFFIX, "repeat_penalty": -1.0}, "repeat_penalty"),
    ({"input_prefix": PREFIX, "input_suffix": SUFFIX, "prompt": "paris " * CONTEXT}, "prompt"),
]


@pytest.mark.parametrize("body,field", ERRORS, ids=[f for _, f in ERRORS])
def test_bad_input_is_a_400_naming_the_field(client, body, field):
    r = client.post("/infill", json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == 400 and error["type"] == "invalid_request_error"  # llama-server's shape
    assert error["param"] == field and error["message"].startswith(field), error


def test_unknown_llama_server_fields_are_named(client):
    """llama.vim's samplers: its infill sampler, which hearth does not run, is named (hearth.api.llama_chain)."""
    r = client.post("/infill", json={"input_prefix": PREFIX, "input_suffix": SUFFIX, "samplers": ["top_k", "infill"],
                                     "t_max_prompt_ms": 500, "cache_prompt": True, **GREEDY})
    assert r.status_code == 200 and r.headers["x-hearth-ignored-fields"] == "t_max_prompt_ms,samplers[1]"


def test_a_model_without_fim_tokens_is_refused(fake):
    r = fake.client.post("/infill", json={"input_prefix": PREFIX, "input_suffix": SUFFIX})
    assert r.status_code == 400
    assert r.json()["error"] == {"code": 400, "type": "invalid_request_error", "param": "model", "message": (
        "Infill is not supported by this model: prefix token is missing. suffix token is missing. "
        "middle token is missing. ")}
    r = fake.client.post("/v1/completions", json={"prompt": PREFIX, "suffix": SUFFIX})
    error = r.json()["error"]
    assert r.status_code == 400 and error["param"] == "suffix" and "fill-in-the-middle" in error["message"]
    assert not fake.engine.added  # nothing ran


def test_a_stop_word_ends_it_as_word(client):
    """llama-server's stop_type "word" and stopping_word, with a stop string the greedy answer holds."""
    ask = {"input_prefix": PREFIX, "input_suffix": SUFFIX, **GREEDY, "n_predict": 12}
    free = client.post("/infill", json=ask).json()["content"]
    word = free.strip()[1:3]
    assert len(word) == 2, free
    for stop in ([word], word):  # llama-server takes one stop string as a string too
        body = client.post("/infill", json={**ask, "stop": stop}).json()
        assert (body["stop_type"], body["stopping_word"]) == ("word", word), body
        assert body["content"] == free[:free.index(word)]


@pytest.fixture
def fim_fake(make_fake):
    """The scripted fake (tests/server/fakes.py), its tokenizer given FIM ids."""
    fake = make_fake()
    (served,) = fake.client.app.state.models.loaded()
    served.tokenizer = FIMFakeTokenizer()
    return fake


def test_n_indent_ends_the_block_as_llama_server(fim_fake):
    """The line back at the margin is cut where its text starts; the rest of the answer is aborted."""
    r = fim_fake.client.post("/infill", json={"input_prefix": "script:indent", "input_suffix": "", "n_indent": 4})
    body = r.json()
    assert (body["content"], body["stop_type"]) == ("a = 1\n    b = 2\n    c = 3\n", "limit"), body
    assert r.headers.get("x-hearth-ignored-fields") is None and fim_fake.engine.aborted
    whole = fim_fake.client.post("/infill", json={"input_prefix": "script:indent", "input_suffix": ""}).json()
    assert whole["content"] == "a = 1\n    b = 2\n    c = 3\nd = 4\ne = 5\nf" and whole["stop_type"] == "eos"


def test_a_streamed_n_indent_cut_sends_no_text_it_takes_back(fim_fake):
    """The deltas join to the whole reply's content: the line back at the margin waits until it is judged
    (llama-server sends it first, and an editor joining its deltas inserts what the cut leaves out)."""
    ask = {"input_prefix": "script:indent", "input_suffix": "", "n_indent": 4}
    with fim_fake.client.stream("POST", "/infill", json={**ask, "stream": True}) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line]
    *deltas, last = chunks
    assert "".join(c["content"] for c in deltas) == "a = 1\n    b = 2\n    c = 3\n"
    assert last["stop"] is True and last["stop_type"] == "limit"


def test_an_engine_error_mid_stream_is_a_last_event_in_llama_servers_shape(fim_fake):
    """The scripted fake's `script:fail` prompt fails after one piece."""
    fake = fim_fake
    with fake.client.stream("POST", "/infill", json={"input_prefix": "script:fail", "input_suffix": "",
                                                     "stream": True}) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line]
    assert chunks[0]["content"] == "partial" and chunks[0]["stop"] is False
    assert chunks[-1]["error"]["code"] == 500 and "boom" in chunks[-1]["error"]["message"]
    assert not fake.engine.live  # aborted, blocks freed


class FIMFakeTokenizer(FakeTokenizer):
    """Code points, with FIM markers in the private-use area."""
    FIM = {"fim_pre": 0xE000, "fim_suf": 0xE001, "fim_mid": 0xE002}

    def special(self, slot: str) -> int | None:
        return self.FIM.get(slot)


def test_an_empty_suffix_on_a_model_without_fim_tokens_is_no_suffix(fake):
    """OpenAI's suffix "" means none (clients send it as a default): not a 400 where the model has no FIM."""
    r = fake.client.post("/v1/completions", json={"prompt": "hi", "suffix": ""})
    assert r.status_code == 200, r.text
    assert fake.engine.added


def test_suffix_text_is_code_on_both_routes(client):
    """A control token's text in the code stays characters on /v1/completions as on /infill: the same prompt."""
    code = "x = '<|fim_middle|>'\n"
    infill = client.post("/infill", json={"input_prefix": code, "input_suffix": code, **GREEDY}).json()
    r = client.post("/v1/completions", json={"prompt": code, "suffix": code, "max_tokens": 6, "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == infill["tokens_evaluated"]
    assert r.json()["choices"][0]["text"] == infill["content"]
