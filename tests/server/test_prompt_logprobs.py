"""vLLM's `prompt_logprobs` request field on /v1/completions (per choice) and /v1/chat/completions (top
level), on a real tiny model: vLLM's shape (null for the first token, token ids as string keys, each
{"logprob", "rank", "decoded_token"}), the prompt token's rank against a full log-softmax of the
model's own logits, the same values as the echo + logprobs path, and vLLM's refusals (a stream, -1,
negative, more than the vocabulary) as 400s naming the field."""

from __future__ import annotations

import openai
import pytest
import torch
from starlette.testclient import TestClient

from hearth.api import guarded
from hearth.api.app import create_app
from hearth.api.served import ServedModel
from hearth.engine.async_engine import AsyncEngine
from hearth.llm import LLM
from hearth.tool_guard.checks import NO_CALL, Checked, Problem
from tests.gguf_factory import write_tiny_gguf
from tests.teacher_forced import logits_from

N = 3
ATOL = 1e-4
"""The server's chunked prefill against one prefill of the same f32 model (measured ~1e-6)."""
PROMPT = "the capital of france is paris and the capital of spain is madrid"
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("tiny") / "tiny-llama.gguf"
    write_tiny_gguf(p, "llama", context=2048)
    return p


@pytest.fixture(scope="module")
def served(model_file):
    llm = LLM(str(model_file), max_model_len=1024, max_num_batched_tokens=16, progress=False)
    return ServedModel.from_llm(llm, ["tiny"], AsyncEngine(llm.engine))


@pytest.fixture(scope="module")
def client(served):
    with TestClient(create_app(served)) as c:
        yield c


@pytest.fixture(scope="module")
def reference(model_file):
    """Prompt ids -> [len(ids) - 1, vocab]: the log-softmax after each prefix, from a model of its own
    (one prefill of the whole prompt), row i scoring token i + 1."""
    llm = LLM(str(model_file), max_model_len=1024, progress=False)
    return lambda ids: torch.log_softmax(logits_from(llm, ids, 0)[:-1], -1)


def _ids(client, **body) -> list[int]:
    r = client.post("/tokenize", json={"model": "tiny", **body})
    assert r.status_code == 200, r.text
    return r.json()["tokens"]


def _check_shape(got: list, ids: list[int], ref: torch.Tensor, n: int = N) -> None:
    """vLLM's shape, each value against the reference: the prompt token with its rank in the whole
    vocabulary, the top n ranked 1..n."""
    assert len(got) == len(ids) and got[0] is None
    ranks = []
    for i, entry in enumerate(got[1:]):
        row, token = ref[i], ids[i + 1]
        own = entry[str(token)]
        assert next(iter(entry)) == str(token)  # the prompt token first, as vLLM's
        assert own["logprob"] == pytest.approx(float(row[token]), abs=ATOL)
        low, high = 1 + int((row > row[token] + ATOL).sum()), 1 + int((row > row[token] - ATOL).sum())
        assert low <= own["rank"] <= high
        ranks.append(own["rank"])
        top = row.topk(n)
        assert set(entry) == {str(token), *map(str, top.indices.tolist())}
        for r, (t, v) in enumerate(zip(top.indices.tolist(), top.values.tolist()), 1):
            assert entry[str(t)]["logprob"] == pytest.approx(v, abs=ATOL)
            if t != token:
                assert entry[str(t)]["rank"] == r
        for t, e in entry.items():
            assert set(e) == {"logprob", "rank", "decoded_token"} and isinstance(e["decoded_token"], str)
    assert len(set(ranks)) > 3  # a random model ranks the prompt's tokens all over its vocabulary


def test_completions_shape_ranks_and_values(client, reference):
    ids = _ids(client, prompt=PROMPT)
    r = client.post("/v1/completions", json={"model": "tiny", "prompt": PROMPT, "max_tokens": 2, "temperature": 0,
                                             "prompt_logprobs": N})
    assert r.status_code == 200, r.text
    (choice,) = r.json()["choices"]
    _check_shape(choice["prompt_logprobs"], ids, reference(ids))
    decoded = client.post("/detokenize", json={"model": "tiny", "tokens": [ids[1]]}).json()["prompt"]
    assert choice["prompt_logprobs"][1][str(ids[1])]["decoded_token"] == decoded
    plain = client.post("/v1/completions", json={"model": "tiny", "prompt": PROMPT, "max_tokens": 2, "temperature": 0})
    assert "prompt_logprobs" not in plain.json()["choices"][0]


def test_completions_equal_the_echo_logprobs_path(client):
    """The same numbers as echo + logprobs (OpenAI's legacy shape of the prompt's logprobs), both asked
    at once with different N (the engine scores the larger; each view takes its own)."""
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 0, "echo": True, "logprobs": 2, "prompt_logprobs": N}
    r = client.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    (choice,) = r.json()["choices"]
    legacy, vllm = choice["logprobs"], choice["prompt_logprobs"]
    assert legacy["token_logprobs"][0] is None and vllm[0] is None
    ids = _ids(client, prompt=PROMPT)
    for i, (token, lp, top) in enumerate(zip(ids[1:], legacy["token_logprobs"][1:], legacy["top_logprobs"][1:]), 1):
        assert vllm[i][str(token)]["logprob"] == lp
        # legacy's top is keyed by token text (two tokens of one text are one key): each is one of ours
        ours = {(e["decoded_token"], e["logprob"]) for e in vllm[i].values()}
        assert set(top.items()) <= ours and top


def test_completions_n_and_a_batch_each_choice_holds_its_prompts(client, reference):
    other = "hello world, how are you"
    r = client.post("/v1/completions", json={"model": "tiny", "prompt": [PROMPT, other], "n": 2, "max_tokens": 2,
                                             "temperature": 1, "seed": 3, "prompt_logprobs": 1})
    assert r.status_code == 200, r.text
    choices = sorted(r.json()["choices"], key=lambda c: c["index"])
    assert choices[0]["prompt_logprobs"] == choices[1]["prompt_logprobs"]
    assert choices[2]["prompt_logprobs"] == choices[3]["prompt_logprobs"]
    for text, c in ((PROMPT, choices[0]), (other, choices[2])):
        ids = _ids(client, prompt=text)
        _check_shape(c["prompt_logprobs"], ids, reference(ids), n=1)


@pytest.mark.parametrize("tools", [None, [WEATHER]], ids=["plain", "tool-guard"])
def test_chat_top_level_shape(client, served, reference, tools, monkeypatch):
    """Top level, as vLLM's chat response holds it; with tools the tool guard's attempts run. One
    engine request scores the prompt: not the other choice, nor a retry."""
    asked, add = [], served.engine.add_request

    def spy(ids, params, **kw):
        asked.append(params.prompt_logprobs)
        return add(ids, params, **kw)

    monkeypatch.setattr(served.engine, "add_request", spy)
    if tools:  # whatever the random model says, the first 4 attempts fail: a choice resamples, then re-prompts
        real, checks = guarded.check_calls, []

        def fail_first(held, schemas, required):  # called once per attempt
            checks.append(len(checks))
            if len(checks) <= 4:
                return Checked(list(held), [Problem(NO_CALL, "scripted: a call was due")])
            return real(held, schemas, required)

        monkeypatch.setattr(guarded, "check_calls", fail_first)
        monkeypatch.setattr(guarded, "NO_RETRY_FINISH", ())  # a random model always runs to max_tokens
    messages = [{"role": "user", "content": PROMPT}]
    extra = {"tools": tools} if tools else {}
    ids = _ids(client, messages=messages, **extra)
    r = client.post("/v1/chat/completions", json={"model": "tiny", "messages": messages, "max_tokens": 3,
                                                  "temperature": 0, "prompt_logprobs": N, "n": 2, **extra})
    assert r.status_code == 200, r.text
    body = r.json()
    _check_shape(body["prompt_logprobs"], ids, reference(ids))
    assert all("prompt_logprobs" not in c for c in body["choices"])
    assert ("hearth" in body) == bool(tools)  # the guard's report: its attempts ran
    assert sorted(asked, key=str) == [N] + [None] * (len(asked) - 1) and len(asked) >= 2
    if tools:
        retries = [r["kind"] for c in body["hearth"]["choices"] for r in c["retries"]]
        assert {"resample", "reprompt"} <= set(retries) and len(asked) == 2 + len(retries)


@pytest.mark.parametrize("path,body", [
    ("/v1/completions", {"prompt": PROMPT}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPT}]}),
], ids=["completions", "chat"])
@pytest.mark.parametrize("value,stream,why", [
    (2, True, "prompt_logprobs: is not available when stream is true"),
    (-1, True, "prompt_logprobs: is not available when stream is true"),  # vLLM's order: the stream first
    (-1, False, "prompt_logprobs: must be at most 20 (the server's --max-logprobs), got -1 (-1 asks for the whole vocabulary)"),
    (-3, False, "prompt_logprobs: must be >= 0, got -3"),
    (21, False, "prompt_logprobs: must be at most 20 (the server's --max-logprobs), got 21"),  # vLLM's max_logprobs: a vocabulary-wide
    (151936, False, "prompt_logprobs: must be at most 20 (the server's --max-logprobs), got 151936"),  # top k per prompt token (~86 MB each)
    (True, False, "prompt_logprobs: "),
    ("2", False, "prompt_logprobs: "),
])
def test_refused_with_the_field_named(client, path, body, value, stream, why):
    r = client.post(path, json={"model": "tiny", "max_tokens": 2, **body, "prompt_logprobs": value, "stream": stream})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "prompt_logprobs" and err["message"].startswith(why), err


@pytest.mark.parametrize("path,body", [
    ("/v1/completions", {"prompt": PROMPT}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPT}]}),
], ids=["completions", "chat"])
def test_zero_with_a_stream_passes_as_vllms(client, path, body):
    """vLLM refuses a stream only for a value that would return something (> 0 or -1)."""
    r = client.post(path, json={"model": "tiny", "max_tokens": 2, **body, "prompt_logprobs": 0, "stream": True})
    assert r.status_code == 200 and r.text.rstrip().endswith("data: [DONE]"), r.text
    assert "prompt_logprobs" not in r.text


def test_openai_sdk_round_trip(client, reference):
    """A vLLM client's code, unmodified: extra_body in, the extra field read back."""
    sdk = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=client, max_retries=0)
    ids = _ids(client, prompt=PROMPT)
    done = sdk.completions.create(model="tiny", prompt=PROMPT, max_tokens=1, extra_body={"prompt_logprobs": N})
    _check_shape(done.choices[0].prompt_logprobs, ids, reference(ids))
    messages = [{"role": "user", "content": PROMPT}]
    chat = sdk.chat.completions.create(model="tiny", messages=messages, max_tokens=1, extra_body={"prompt_logprobs": N})
    chat_ids = _ids(client, messages=messages)
    _check_shape(chat.prompt_logprobs, chat_ids, reference(chat_ids))
    with pytest.raises(openai.BadRequestError, match="prompt_logprobs: is not available when stream is true"):
        sdk.completions.create(model="tiny", prompt=PROMPT, max_tokens=1, stream=True, extra_body={"prompt_logprobs": 1})


@pytest.mark.parametrize("path,body,param", [
    ("/v1/completions", {"prompt": PROMPT, "logprobs": 21}, "logprobs"),
    ("/v1/completions", {"prompt": PROMPT, "prompt_logprobs": 21}, "prompt_logprobs"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPT}], "logprobs": True,
                              "top_logprobs": 21}, "top_logprobs"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPT}], "prompt_logprobs": 21},
     "prompt_logprobs"),
], ids=["logprobs", "completions-prompt", "top_logprobs", "chat-prompt"])
def test_one_cap_of_20_for_every_logprobs_count(client, path, body, param):
    """vLLM's max_logprobs (20) for generated and prompt logprobs alike: prompt_logprobs had none, and
    151936 (a Qwen's vocabulary) cost ~86 MB and 0.22 s per prompt token."""
    r = client.post(path, json={"model": "tiny", "max_tokens": 2, **body})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (err["param"], err["message"]) == (param, f"{param}: must be at most 20 (the server's --max-logprobs), got 21")
    ok = client.post(path, json={"model": "tiny", "max_tokens": 2, **body, param: 20})
    assert ok.status_code == 200, ok.text


def _client_capped_at(model_file, cap: int) -> TestClient:
    llm = LLM(str(model_file), max_model_len=256, max_logprobs=cap, progress=False)
    return TestClient(create_app(ServedModel.from_llm(llm, ["tiny"], AsyncEngine(llm.engine))))


@pytest.mark.parametrize("path,body,param", [
    ("/v1/completions", {"prompt": PROMPT, "logprobs": 6}, "logprobs"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPT}], "logprobs": True,
                              "top_logprobs": 6}, "top_logprobs"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPT}], "prompt_logprobs": 6},
     "prompt_logprobs"),
], ids=["logprobs", "top_logprobs", "prompt_logprobs"])
def test_the_cap_is_the_engines_max_logprobs(model_file, path, body, param):
    """`hearth serve --max-logprobs 5` (EngineConfig.max_logprobs): the routes refuse past the engine's
    own cap, not a constant of the API."""
    with _client_capped_at(model_file, 5) as client:
        r = client.post(path, json={"model": "tiny", "max_tokens": 1, **body})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert (err["param"], err["message"]) == (param, f"{param}: must be at most 5 (the server's --max-logprobs), got 6")
        assert client.post(path, json={"model": "tiny", "max_tokens": 1, **body, param: 5}).status_code == 200


def test_no_cap_takes_minus_one_as_the_whole_vocabulary(model_file, served):
    """vLLM's --max-logprobs -1: no cap, and a request's -1 asks for every token of the vocabulary."""
    vocab = served.vocab_size
    with _client_capped_at(model_file, -1) as client:
        r = client.post("/v1/chat/completions", json={"model": "tiny", "messages": [{"role": "user", "content": PROMPT}],
                                                      "max_tokens": 1, "logprobs": True, "top_logprobs": -1})
        assert r.status_code == 200, r.text  # a list, where completions' text keys would merge equal strings
        assert len(r.json()["choices"][0]["logprobs"]["content"][0]["top_logprobs"]) == vocab
        r = client.post("/v1/completions", json={"model": "tiny", "prompt": PROMPT, "max_tokens": 1, "logprobs": 21})
        assert r.status_code == 200, r.text
        r = client.post("/v1/completions", json={"model": "tiny", "prompt": PROMPT, "max_tokens": 1, "logprobs": -2})
        assert r.status_code == 400 and r.json()["error"]["message"] == "logprobs: must be >= 0, got -2", r.text
