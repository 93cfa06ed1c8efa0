"""Ollama's native API (/api/chat, /api/generate, /api/tags, /api/show, /api/ps, /api/version and the
management routes hearth answers with what it does instead), on the scripted fake engine: NDJSON
streams by default and whole replies, tool calls with arguments as objects (the tool guard on, as on
the OpenAI route), thinking, `format`, `options` mapped to SamplingParams, `:latest` names, and errors
in Ollama's shape ({"error": "..."}, 400 naming the field, 404 for a model). The last test drives a real
SmolLM2 server with the `ollama` Python client, unmodified."""

from __future__ import annotations

import asyncio
import json
import math
import time

import httpx
import ollama
import pytest
from starlette.testclient import TestClient

from hearth.api.app import create_app
from hearth.api.model_pool import ModelPool
from hearth.api.model_spec import ModelSpec
from hearth.api.ollama_options import unloads_now
from hearth.api.served import gguf_facts
from hearth.loader.gguf_loader import GGUFFile
from tests.gguf_factory import write_tiny_gguf
from tests.server import test_guided
from tests.server.conftest import API_KEY, TIMEOUT
from tests.server.fakes import CHATML_NO_TOOLS, FakeEngine, FakeTokenizer, fake_served

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = [{"type": "function",
            "function": {"name": "get_weather", "description": "Weather in a city", "parameters": CITY}}]
USER = [{"role": "user", "content": "hi"}]
NS_FIELDS = ("total_duration", "load_duration", "prompt_eval_duration", "eval_duration")


def chat(fake, content: str, **kw):
    messages = [{"role": "user", "content": content}]
    return fake.client.post("/api/chat", json={"model": "fake-model", "messages": messages, **kw})


def lines(r) -> list[dict]:
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(x) for x in r.text.splitlines() if x.strip()]


def test_chat_streams_ndjson_by_default_and_ends_with_counts(fake):
    r = fake.client.post("/api/chat", json={"model": "fake-model:latest",
                                            "messages": [{"role": "user", "content": "script:hello"}]})
    out = lines(r)
    assert all(o["model"] == "fake-model:latest" and o["created_at"].endswith("Z") for o in out)
    assert [o["done"] for o in out] == [False] * (len(out) - 1) + [True]
    assert "".join(o["message"]["content"] for o in out) == "Hello there!"
    assert all(o["message"]["role"] == "assistant" for o in out)
    last = out[-1]
    assert last["done_reason"] == "stop" and last["message"]["content"] == ""
    assert last["eval_count"] == 4 and last["prompt_eval_count"] == len(fake.last.prompt)
    assert all(isinstance(last[k], int) and last[k] >= 0 for k in NS_FIELDS)
    assert last["total_duration"] >= last["eval_duration"]


def test_chat_whole_reply(fake):
    r = chat(fake, "script:hello", stream=False)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    body = r.json()
    assert body["message"] == {"role": "assistant", "content": "Hello there!"}
    assert body["done"] is True and body["done_reason"] == "stop" and body["eval_count"] == 4


def test_num_predict_ends_as_length(fake):
    body = chat(fake, "script:hello", stream=False, options={"num_predict": 2}).json()
    assert body["done_reason"] == "length" and body["eval_count"] == 2
    assert fake.last.params.max_tokens == 2


def test_tool_call_arguments_are_an_object_whole_and_streamed(fake):
    body = chat(fake, "script:tool", stream=False, tools=WEATHER).json()
    assert body["message"]["content"] == "Let me check."
    (call,) = body["message"]["tool_calls"]
    assert call["function"] == {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}
    assert body["done_reason"] == "stop"
    out = lines(chat(fake, "script:tool", tools=WEATHER))
    calls = [c for o in out for c in o["message"].get("tool_calls", [])]
    assert [c["function"]["arguments"] for c in calls] == [{"city": "Paris"}]
    assert "".join(o["message"]["content"] for o in out) == "Let me check."


def test_the_tool_guard_applies_as_on_the_openai_route(fake):
    """guard_unknown's first attempt calls a tool that does not exist: the guard retries, the client gets
    the good call, and the `hearth` field says what the guard did."""
    body = chat(fake, "script:guard_unknown", stream=False, tools=WEATHER).json()
    assert [c["function"]["name"] for c in body["message"]["tool_calls"]] == ["get_weather"]
    assert body["hearth"]["tool_guard"] == "guard" and body["hearth"]["retries"]
    assert len(fake.engine.added) == 2


def test_logprobs_whole_and_streamed(fake):
    body = chat(fake, "script:hello", stream=False, logprobs=True, top_logprobs=2).json()
    assert [x["token"] for x in body["logprobs"]] == ["H", "l", "t", "!"]  # the fake's token: a piece's first char
    assert all(len(x["top_logprobs"]) == 2 and x["logprob"] == -0.5 for x in body["logprobs"])
    assert fake.last.params.logprobs == 2
    out = lines(chat(fake, "script:hello", logprobs=True))
    assert [x["token"] for o in out for x in o.get("logprobs", [])] == ["H", "l", "t", "!"]
    assert all(x["top_logprobs"] == [] for o in out for x in o.get("logprobs", []))
    body = fake.client.post("/api/generate", json={"model": "fake-model", "prompt": "hi", "stream": False,
                                                   "logprobs": True}).json()
    assert [x["token"] for x in body["logprobs"]] == ["o"]
    assert "logprobs" not in chat(fake, "hi", stream=False, top_logprobs=3).json()  # only with logprobs: true


def test_thinking_is_its_own_field(fake):
    body = chat(fake, "script:think", stream=False).json()
    assert body["message"] == {"role": "assistant", "content": "Hi!", "thinking": "The user wants a greeting."}
    out = lines(chat(fake, "script:think"))
    assert "".join(o["message"].get("thinking", "") for o in out) == "The user wants a greeting."
    assert "".join(o["message"]["content"] for o in out) == "Hi!"


def test_think_sets_the_templates_switch(make_fake):
    fake = make_fake(template="{{ enable_thinking }} {{ reasoning_effort }}|" + CHATML_NO_TOOLS)
    chat(fake, "hi", stream=False, think=False)
    assert fake.last.prompt.startswith("False |")
    chat(fake, "hi", stream=False, think="max")
    assert fake.last.prompt.startswith("True high|")
    r = chat(fake, "hi", think="very")
    assert r.status_code == 400 and r.json()["error"].startswith("think: ")


def test_think_on_a_model_without_thinking_is_ollamas_400(make_fake):
    """Ollama's rule: `think: true` (or a level) asks a model whose template has no reasoning channel nor switch
    for one: a 400 (the answer would come without thinking); `false` is taken by every model."""
    fake = make_fake(template=CHATML_NO_TOOLS)
    assert "thinking" not in fake.client.post("/api/show", json={"model": "fake-model"}).json()["capabilities"]
    for think in (True, "high"):
        r = chat(fake, "hi", stream=False, think=think)
        assert r.status_code == 400 and r.json()["error"] == ("think: this model does not support thinking "
                                                              "(its chat template has no reasoning channel)")
        r = fake.client.post("/api/generate", json={"model": "fake-model", "prompt": "hi", "think": think})
        assert r.status_code == 400
    assert chat(fake, "hi", stream=False, think=False).status_code == 200


def test_history_with_calls_and_results_by_tool_name(fake):
    messages = [{"role": "user", "content": "weather in Paris and Rome?"},
                {"role": "assistant", "content": "", "thinking": "two cities",
                 "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                                {"function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]},
                {"role": "tool", "tool_name": "get_weather", "content": "sunny"},
                {"role": "TOOL", "tool_name": "get_weather", "content": "rainy"}]
    r = fake.client.post("/api/chat", json={"model": "fake-model", "messages": messages, "tools": WEATHER,
                                            "stream": False})
    assert r.status_code == 200, r.text
    prompt = fake.last.prompt
    assert '"arguments": {"city": "Paris"}' in prompt and '"arguments": {"city": "Rome"}' in prompt
    assert "<think>two cities</think>" in prompt
    assert prompt.index("sunny") < prompt.index("rainy")


def test_a_final_assistant_message_is_continued(fake):
    messages = [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "The colour is"}]
    r = fake.client.post("/api/chat", json={"model": "fake-model", "messages": messages, "stream": False})
    assert r.status_code == 200 and fake.last.prompt.endswith("<|im_start|>assistant\nThe colour is")
    messages[-1]["content"] = ""  # an empty one prefills nothing: a new answer
    fake.client.post("/api/chat", json={"model": "fake-model", "messages": messages, "stream": False})
    assert fake.last.prompt.endswith("<|im_start|>assistant\n<|im_end|>\n<|im_start|>assistant\n")


def test_the_ollama_client_reads_calls_and_streams_in_process(fake):
    """The `ollama` package's async client on the app in-process: its types parse every reply."""
    async def run():
        client = ollama.AsyncClient(host="http://testserver", transport=httpx.ASGITransport(fake.client.app))
        r = await client.chat(model="fake-model:latest", messages=[{"role": "user", "content": "script:tool"}],
                              tools=WEATHER)
        (call,) = r.message.tool_calls
        assert call.function.name == "get_weather" and call.function.arguments == {"city": "Paris"}
        parts = [p async for p in await client.chat(model="fake-model", stream=True,
                                                    messages=[{"role": "user", "content": "script:think"}])]
        assert "".join(p.message.thinking or "" for p in parts) == "The user wants a greeting."
        assert "".join(p.message.content for p in parts) == "Hi!" and parts[-1].done_reason == "stop"
        gen = await client.generate(model="fake-model", prompt="script:hello", options={"num_predict": 3})
        assert gen.response == "Hello there" and gen.done_reason == "length" and gen.eval_count == 3
        listed = await client.list()
        assert [m.model for m in listed.models] == ["fake-model:latest"]
        with pytest.raises(ollama.ResponseError) as e:
            await client.chat(model="fake-model", messages=[{"role": "user", "content": "hi"}],
                              options={"temperature": "warm"})
        assert e.value.status_code == 400 and e.value.error.startswith("options.temperature: ")

    asyncio.run(run())


def test_format_json_or_a_schema(fake):
    chat(fake, "script:json", stream=False, format="json")
    assert fake.last.params.structured_output.json_object
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    body = chat(fake, "script:json", stream=False, format=schema).json()
    assert json.loads(body["message"]["content"]) == {"answer": "yes"}
    assert fake.last.params.structured_output.json_schema == schema
    r = chat(fake, "hi", format="xml")
    assert r.status_code == 400 and r.json() == {"error": "format: must be \"json\" or a JSON schema object, got 'xml'"}


@pytest.mark.parametrize("fmt", ["json", test_guided.EXPONENT_SCHEMA])
def test_format_keeps_a_numbers_exponent(fake, fmt):
    """`format` reaches the schema grammar the OpenAI routes' fields do (tests/server/test_guided.py)."""
    chat(fake, "hi", stream=False, format=fmt)
    so = fake.last.params.structured_output
    assert test_guided.takes(so, '{"q":{"v":6.626e-27}}') and not test_guided.takes(so, '{"q":{"v":1e999}}')


def test_options_map_to_sampling(fake):
    options = {"temperature": 0.5, "top_p": 0.9, "top_k": 20, "min_p": 0.05, "seed": 7, "repeat_penalty": 1.1,
               "presence_penalty": 0.2, "frequency_penalty": 0.3, "stop": ["\n\n"], "num_predict": 9, "num_ctx": 2048,
               "mirostat": 2, "tfs_z": 1.0, "num_gpu": 1, "no_such_option": True}
    r = chat(fake, "hi", stream=False, options=options)
    assert r.status_code == 200, r.text
    p = fake.last.params
    assert (p.temperature, p.top_p, p.top_k, p.min_p, p.seed) == (0.5, 0.9, 20, 0.05, 7)
    assert (p.repetition_penalty, p.presence_penalty, p.frequency_penalty) == (1.1, 0.2, 0.3)
    assert p.stop == ["\n\n"] and p.max_tokens == 9 and p.mirostat == 2
    ignored = r.headers["x-hearth-ignored-fields"].split(",")
    assert set(ignored) == {"options.tfs_z", "options.num_gpu", "options.no_such_option"}
    chat(fake, "hi", stream=False, options={"num_predict": -1, "seed": -1, "stop": "x", "top_k": 3.0})
    p = fake.last.params
    assert p.max_tokens is None and p.seed is None and p.stop == ["x"] and p.top_k == 3


def test_num_predict_past_the_context_runs_until_it_is_full(fake):
    """Continue sends num_predict 4096 whatever the context: Ollama reads it as a cap, not an error."""
    r = chat(fake, "script:hello", stream=False, options={"num_predict": 100000})
    assert r.status_code == 200 and fake.last.params.max_tokens is None
    r = fake.client.post("/api/generate", json={"model": "fake-model", "prompt": "hi", "stream": False,
                                                "options": {"num_predict": 4096}})
    assert r.status_code == 200 and fake.last.params.max_tokens is None


def test_num_ctx_past_the_context_and_num_predict_0_run_as_ollama_runs_them(fake):
    """Clients send a large num_ctx with every request (aider's ~tokens x 1.25 + 8192): past the served
    context it is ignored and named, not a 400; num_predict 0 is no limit, as Ollama's runner reads it."""
    r = chat(fake, "script:hello", stream=False, options={"num_ctx": 32768, "num_predict": 0})
    assert r.status_code == 200 and fake.last.params.max_tokens is None
    assert r.headers["x-hearth-ignored-fields"] == "options.num_ctx"


@pytest.mark.parametrize("options,error", [
    ({"temperature": "hot"}, "options.temperature: must be a number, not a string"),
    ({"top_k": True}, "options.top_k: must be an integer, not a boolean"),
    ({"stop": [1]}, "options.stop: must be a list of strings, not a list"),
    ({"temperature": -1}, "options.temperature: must be >= 0, got -1"),
])
def test_bad_options_name_the_option(fake, options, error):
    r = chat(fake, "hi", options=options)
    assert r.status_code == 400 and r.json()["error"].startswith(error), r.text


@pytest.mark.parametrize("body,error", [
    ({"messages": [{"role": "user", "content": "hi", "images": ["iVBOR"]}]},
     "messages[0].images: images are not supported"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role: unknown role 'robot'"),
    ({"messages": "hi"}, "messages: "),
    ({"messages": [{"role": "user", "content": "hi"}], "stream": "yes"}, "stream: "),
    ({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {}}]},
     "tools[0].function.name: is required"),
    ({"messages": [{"role": "user", "content": "hi"}], "logprobs": True, "top_logprobs": 21}, "top_logprobs: "),
])
def test_bad_chat_input_is_an_ollama_400_naming_the_field(fake, body, error):
    r = fake.client.post("/api/chat", json={"model": "fake-model", **body})
    assert r.status_code == 400 and list(r.json()) == ["error"] and r.json()["error"].startswith(error), r.text


def test_a_prompt_past_the_context_is_a_400_naming_its_field(make_fake):
    fake = make_fake(engine=FakeEngine(max_model_len=64))
    r = chat(fake, "x" * 100)
    assert r.status_code == 400 and r.json()["error"].startswith("messages: prompt is "), r.text
    r = fake.client.post("/api/generate", json={"model": "fake-model", "prompt": "x" * 100})
    assert r.status_code == 400 and r.json()["error"].startswith("prompt is 150 tokens but the context"), r.text


def test_unknown_model_is_ollamas_404_and_names_take_the_latest_tag(make_fake):
    fake = make_fake(names=("smollm2-135m", "tiny"))
    r = fake.client.post("/api/chat", json={"model": "nope", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 404 and r.json() == {"error": "model 'nope' not found"}
    assert fake.client.post("/api/show", json={"model": "nope:latest"}).status_code == 404
    for name in ("smollm2-135m", "smollm2-135m:latest", "tiny:latest"):
        r = fake.client.post("/api/generate", json={"model": name, "prompt": "hi", "stream": False})
        assert r.status_code == 200 and r.json()["model"] == name
    assert not fake.client.post("/api/generate", json={"model": "tiny:7b", "prompt": "hi"}).status_code == 200


def test_an_empty_conversation_or_prompt_loads_the_model(fake):
    r = fake.client.post("/api/chat", json={"model": "fake-model", "messages": []})
    assert r.json() == {"model": "fake-model", "created_at": r.json()["created_at"],
                        "message": {"role": "assistant", "content": ""}, "done": True, "done_reason": "load"}
    r = fake.client.post("/api/generate", json={"model": "fake-model", "keep_alive": "5m"})
    assert r.json()["response"] == "" and r.json()["done_reason"] == "load"
    assert fake.engine.added == []


def test_generate_renders_system_and_prompt_and_returns_a_context(fake):
    r = fake.client.post("/api/generate", json={"model": "fake-model", "prompt": "script:hello", "system": "Be brief.",
                                                "stream": False})
    body = r.json()
    assert body["response"] == "Hello there!" and body["done_reason"] == "stop"
    first = fake.last.prompt
    assert first.startswith("<|im_start|>system\nBe brief.<|im_end|>") and first.endswith("<|im_start|>assistant\n")
    assert body["context"][:len(first)] == [ord(c) for c in first] and len(body["context"]) == len(first) + 4
    fake.client.post("/api/generate", json={"model": "fake-model", "prompt": "again", "context": body["context"],
                                            "stream": False})
    assert fake.last.prompt.startswith(first)  # the earlier turn, then this one


def test_generate_streams_and_raw_takes_the_prompt_as_it_is(fake):
    out = lines(fake.client.post("/api/generate", json={"model": "fake-model", "prompt": "[INST] script:hello",
                                                        "raw": True}))
    assert fake.last.prompt == "[INST] script:hello"
    assert "".join(o["response"] for o in out) == "Hello there!" and out[-1]["done"] is True
    assert "context" not in out[-1]


@pytest.mark.parametrize("body,error", [
    ({"prompt": "hi", "images": ["iVBOR"]}, "images: images are not supported"),
    ({"prompt": "hi", "template": "{{ .Prompt }}"}, "template: hearth renders prompts with the model's own"),
    ({"prompt": "hi", "raw": True, "system": "x"}, "system: raw mode does not support template, system, or context"),
    ({"prompt": "hi", "context": [-1]}, "context: token id -1 is outside the vocabulary"),
    ({"prompt": "hi", "suffix": "end"}, "suffix: is not supported by model 'fake-model'"),
    ({"prompt": "hi", "format": {"type": "nonsense"}}, "format: "),
])
def test_bad_generate_input_is_an_ollama_400(fake, body, error):
    r = fake.client.post("/api/generate", json={"model": "fake-model", **body})
    assert r.status_code == 400 and r.json()["error"].startswith(error), r.text


class FIMTokenizer(FakeTokenizer):
    """The fake tokenizer with fill-in-the-middle tokens (private-use code points)."""
    IDS = {"fim_pre": 0xE000, "fim_suf": 0xE001, "fim_mid": 0xE002}
    bos_id = None

    def special(self, slot: str) -> int | None:
        return self.IDS.get(slot)


def test_generate_with_suffix_runs_the_fill_in_the_middle_prompt_of_v1_completions(fake):
    fake.client.app.state.models.slots[0].served.tokenizer = FIMTokenizer()
    body = fake.client.post("/api/generate", json={"model": "fake-model", "prompt": "def f(", "suffix": "    return x",
                                                   "system": "ignored", "stream": False}).json()
    assert body["response"] == "ok" and "context" not in body
    ran = fake.last.prompt
    assert ran == "\ue000def f(\ue001    return x\ue002"
    fake.openai.completions.create(model="fake-model", prompt="def f(", suffix="    return x", max_tokens=2)
    assert fake.last.prompt == ran


def test_an_engine_failure_mid_stream_is_an_error_line(fake):
    out = lines(chat(fake, "script:fail"))
    assert out[0]["message"]["content"] == "partial"
    assert out[-1] == {"error": "engine step failed: RuntimeError: boom"}


def test_tags_show_ps_version_and_heartbeat(fake):
    (entry,) = fake.client.get("/api/tags").json()["models"]
    assert entry["name"] == entry["model"] == "fake-model:latest"
    assert entry["details"]["format"] == "gguf" and entry["modified_at"].endswith("Z")
    show = fake.client.post("/api/show", json={"model": "fake-model:latest"}).json()
    assert show["template"] == fake.client.app.state.models.slots[0].served.template_source
    assert "completion" in show["capabilities"] and "tools" in show["capabilities"]
    assert show["hearth"] == {"loaded": True, "context_length": 4096} and "model_info" in show
    assert show["parameters"] == "num_ctx 4096"  # Continue reads its context from this line
    (running,) = fake.client.get("/api/ps").json()["models"]
    assert running["name"] == "fake-model:latest" and running["context_length"] == 4096
    assert fake.client.get("/api/version").json()["version"]
    assert fake.client.head("/").status_code == 200 and fake.client.head("/api/tags").status_code == 200


@pytest.mark.parametrize("method,path,says", [
    ("POST", "/api/pull", "hearth pull NAME"), ("POST", "/api/push", "no model registry"),
    ("POST", "/api/create", "hearth serve PATH --served-model-name NAME"), ("POST", "/api/copy", "--served-model-name"),
    ("DELETE", "/api/delete", "hearth models"), ("POST", "/api/blobs/sha256:00", "hearth serve PATH"),
])
def test_management_routes_say_what_hearth_does_instead(fake, method, path, says):
    r = fake.client.request(method, path, json={"model": "x"})
    assert r.status_code == 400 and says in r.json()["error"], r.text


def test_auth_and_errors_keep_ollamas_shape(make_fake):
    fake = make_fake(api_key="k")
    r = fake.client.get("/api/tags")
    assert r.status_code == 401 and list(r.json()) == ["error"]
    assert fake.client.head("/").status_code == 200  # the heartbeat needs no key
    r = fake.client.get("/api/tags", headers={"Authorization": "Bearer k"})
    assert r.status_code == 200
    r = fake.client.post("/api/chat", content=b"", headers={"Authorization": "Bearer k"})
    assert r.status_code == 400 and r.json() == {"error": "the request body is empty; it must be a JSON object"}


def test_the_ollama_client_unmodified_against_a_real_server(real_server):
    client = ollama.Client(host=real_server.url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=TIMEOUT)
    model = f"{real_server.model}:latest"
    assert model in [m.model for m in client.list().models]
    show = client.show(model)
    assert show.details.family == "llama" and show.details.quantization_level == "Q4_1"
    assert show.modelinfo["llama.context_length"] == 512 and "completion" in show.capabilities
    greedy = {"temperature": 0, "num_predict": 8, "seed": 1}
    messages = [{"role": "user", "content": "Say hello."}]
    whole = client.chat(model=model, messages=messages, options=greedy)
    assert whole.done and whole.message.content and whole.eval_count <= 8 and whole.prompt_eval_count > 0
    parts = list(client.chat(model=model, messages=messages, options=greedy, stream=True))
    # not equal to `whole` token for token: the second request reads its prompt from the prefix cache
    assert "".join(p.message.content for p in parts) and parts[-1].done and parts[-1].eval_count <= 8
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    structured = client.chat(model=model, messages=messages, format=schema, options={**greedy, "num_predict": 32})
    assert isinstance(json.loads(structured.message.content)["ok"], bool)
    gen = client.generate(model=model, prompt="The capital of France is", options=greedy)
    assert gen.done and gen.response and gen.context
    assert [m.model for m in client.ps().models] == [model]
    with pytest.raises(ollama.ResponseError) as e:
        client.chat(model="no-such-model", messages=messages)
    assert e.value.status_code == 404 and e.value.error == "model 'no-such-model' not found"


def _pinned_and_unpinned() -> tuple[ModelPool, list[str]]:
    """A pool of a pinned model "first" and an unpinned "second", and the names its loader loaded, in order."""
    loads = []

    def loader(spec):
        loads.append(spec.name)
        return fake_served(names=spec.names)

    return ModelPool([ModelSpec(["first"], pinned=True, max_model_len=4096),
                      ModelSpec(["second"], max_model_len=2048)], loader), loads


def test_show_and_tags_do_not_load_a_model_chat_does():
    """Clients call /api/show for every model /api/tags lists: a pool's unloaded models stay unloaded."""
    pool, loads = _pinned_and_unpinned()
    with TestClient(create_app(pool)) as client:
        assert loads == ["first"]
        assert [m["name"] for m in client.get("/api/tags").json()["models"]] == ["first:latest", "second:latest"]
        show = client.post("/api/show", json={"model": "second:latest"}).json()
        assert show["hearth"] == {"loaded": False, "context_length": 2048} and loads == ["first"]
        assert [m["name"] for m in client.get("/api/ps").json()["models"]] == ["first:latest"]
        body = client.post("/api/chat", json={"model": "second", "messages": USER, "stream": False}).json()
        assert body["message"]["content"] == "ok" and loads == ["first", "second"] and body["load_duration"] > 0
        assert [m["name"] for m in client.get("/api/ps").json()["models"]] == ["first:latest", "second:latest"]


def test_tags_size_of_a_split_gguf_is_every_parts(tmp_path):
    """A model split in several files (NAME-00001-of-0000N.gguf): /api/tags' size is the model's, not its
    first file's (which holds the header and a few tensors only)."""
    write_tiny_gguf(tmp_path / "tiny.gguf", "llama", split_max_tensors=8)
    parts = sorted(tmp_path.glob("tiny-*-of-*.gguf"))
    assert len(parts) > 1
    served = fake_served()
    served.path, served.file_size = str(parts[0]), gguf_facts(GGUFFile(parts[0]))["file_size"]
    with TestClient(create_app(served)) as client:
        (entry,) = client.get("/api/tags").json()["models"]
    assert entry["size"] == sum(p.stat().st_size for p in parts)


def test_keep_alive_0_unloads_a_pool_model_and_keeps_a_pinned_one(capfd):
    """`ollama stop MODEL` (keep_alive 0, nothing to answer): an unpinned model unloads ("unload"), is not loaded
    first if it was not, and loads again on its next request; a pinned one stays, and the answer is a 409 saying
    so (a 200 "load" made `ollama stop` print nothing and exit 0, as if it had stopped)."""
    pool, loads = _pinned_and_unpinned()
    with TestClient(create_app(pool)) as client:
        client.post("/api/chat", json={"model": "second", "messages": USER, "stream": False})
        assert [m["name"] for m in client.get("/api/ps").json()["models"]] == ["first:latest", "second:latest"]
        r = client.post("/api/generate", json={"model": "second:latest", "keep_alive": 0}).json()
        assert (r["model"], r["response"], r["done_reason"]) == ("second:latest", "", "unload")
        assert [m["name"] for m in client.get("/api/ps").json()["models"]] == ["first:latest"]
        assert "hearth: unloading second (keep_alive 0)" in capfd.readouterr().err
        r = client.post("/api/chat", json={"model": "second", "messages": [], "keep_alive": "0s"}).json()
        assert r["done_reason"] == "unload" and loads == ["first", "second"]  # not loaded to be unloaded
        r = client.post("/api/chat", json={"model": "first", "messages": [], "keep_alive": "0"})
        assert r.status_code == 409
        assert r.json() == {"error": "model 'first' was not unloaded: it is pinned on this server"}
        assert [m["name"] for m in client.get("/api/ps").json()["models"]] == ["first:latest"]
        client.post("/api/chat", json={"model": "second", "messages": USER, "stream": False})
        assert loads == ["first", "second", "second"]
        assert client.post("/api/generate", json={"model": "second", "keep_alive": "5m"}).json()["done_reason"] == "load"
        assert loads == ["first", "second", "second"]


@pytest.mark.parametrize("stream", [False, True])
def test_keep_alive_0_on_an_answered_request_unloads_once_answered(stream, capfd):
    """Ollama answers a request with keep_alive 0, then unloads its model (its scheduler expires a runner with a
    zero keep_alive when its last request ends); a pinned model stays."""
    pool, loads = _pinned_and_unpinned()
    with TestClient(create_app(pool)) as client:
        for path, body in (("/api/chat", {"messages": USER}), ("/api/generate", {"prompt": "hi"})):
            r = client.post(path, json={"model": "second", "keep_alive": 0, "stream": stream, **body})
            last = [json.loads(line) for line in r.text.splitlines()][-1]
            assert last["done"] is True and last["done_reason"] == "stop"
            text = "".join(json.loads(line).get("response") or json.loads(line).get("message", {}).get("content", "")
                           for line in r.text.splitlines())
            assert text == "ok"
            assert [m["name"] for m in client.get("/api/ps").json()["models"]] == ["first:latest"]
        assert loads == ["first", "second", "second"]
        assert "hearth: unloading second (keep_alive 0)" in capfd.readouterr().err
        r = client.post("/api/chat", json={"model": "first", "messages": USER, "keep_alive": "0s", "stream": stream})
        assert r.status_code == 200 and [m["name"] for m in client.get("/api/ps").json()["models"]] == ["first:latest"]
        client.post("/api/chat", json={"model": "second", "messages": USER, "keep_alive": "5m", "stream": False})
        assert [m["name"] for m in client.get("/api/ps").json()["models"]] == ["first:latest", "second:latest"]


def test_keep_alive_0_on_an_embed_request_unloads_once_answered(tmp_path):
    """/api/embed and /api/embeddings with keep_alive 0: the vectors, then the model unloaded, as Ollama's."""
    from hearth.cli import command_parser
    from hearth.commands.serve import server_config
    from hearth.commands.serve_models import build_pool
    from tests.bert_factory import write_tiny_encoder

    write_tiny_gguf(tmp_path / "chat.gguf", "llama")
    write_tiny_encoder(tmp_path / "embed.gguf", "bert")
    args = command_parser("serve").parse_intermixed_args([str(tmp_path / "chat.gguf"), str(tmp_path / "embed.gguf")])
    pool = build_pool(args)
    with TestClient(create_app(pool, server_config(args))) as client:
        for path, body in (("/api/embed", {"input": "hello"}), ("/api/embeddings", {"prompt": "hello"})):
            r = client.post(path, json={"model": "embed", "keep_alive": 0, **body})
            assert r.status_code == 200 and len(r.json().get("embeddings", [r.json().get("embedding")])[0]) > 0
            assert pool.slots[1].served is None
        for path, body in (("/api/embed", {"input": []}), ("/api/embeddings", {"prompt": ""})):  # preloads
            r = client.post(path, json={"model": "embed", "keep_alive": 0, **body})
            assert r.status_code == 200 and pool.slots[1].served is None
        r = client.post("/api/embed", json={"model": "embed", "input": "hello", "keep_alive": "1h"})
        assert r.status_code == 200 and pool.slots[1].served is not None
        r = client.post("/api/embed", json={"model": "embed", "input": "hello", "keep_alive": "soon"})
        assert r.status_code == 400 and r.json()["error"].startswith("keep_alive: must be a number of seconds")


def test_stop_says_why_a_served_model_stays(tmp_path):
    """`hearth serve MODEL` pins its only model unless --keep-alive is given: `ollama stop MODEL` is a 409 whose
    error (which `ollama stop` prints) says so and how to change it; with --keep-alive the model unloads."""
    from hearth.cli import command_parser
    from hearth.commands.serve import server_config
    from hearth.commands.serve_models import build_pool

    write_tiny_gguf(tmp_path / "chat.gguf", "llama")
    for flags, status in (([], 409), (["--keep-alive", "1h"], 200)):
        args = command_parser("serve").parse_intermixed_args([str(tmp_path / "chat.gguf"), *flags])
        pool = build_pool(args)
        with TestClient(create_app(pool, server_config(args))) as client:
            client.post("/api/generate", json={"model": "chat", "prompt": "hi", "stream": False})
            r = client.post("/api/generate", json={"model": "chat", "keep_alive": 0})
            assert r.status_code == status, r.text
            if status == 409:
                assert r.json()["error"].startswith("model 'chat' was not unloaded: it is this server's only model, "
                                                    "which stays loaded unless `hearth serve` is given --keep-alive")
                assert pool.slots[0].served is not None
            else:
                assert r.json()["done_reason"] == "unload" and pool.slots[0].served is None


@pytest.mark.parametrize("value, zero", [(0, True), (0.0, True), ("0", True), ("0s", True), ("0m0s", True), ("-0h", True),
                                         ("5m", False), (-1, False), ("-1", False), ("1h30m", False), (300, False)])
def test_keep_alive_reads_as_ollama_reads_it(value, zero):
    assert unloads_now(value) is zero


def test_a_bad_keep_alive_is_a_400_naming_it(fake):
    r = fake.client.post("/api/generate", json={"model": "fake-model", "keep_alive": "soon"})
    assert r.status_code == 400 and "keep_alive: must be a number of seconds or a duration" in r.json()["error"]


def test_show_and_tags_describe_a_model_not_yet_loaded_from_its_file(tmp_path):
    """`hearth serve CHAT EMBED`: before EMBED is first used, /api/show and /api/tags say what its file says
    (family, size, quantization, model_info, ["embedding"]), as once it is loaded, and load nothing."""
    from hearth.cli import command_parser
    from hearth.commands.serve import server_config
    from hearth.commands.serve_models import build_pool
    from tests.bert_factory import write_tiny_encoder

    write_tiny_gguf(tmp_path / "chat.gguf", "llama")
    write_tiny_encoder(tmp_path / "embed.gguf", "bert")
    args = command_parser("serve").parse_intermixed_args([str(tmp_path / "chat.gguf"), str(tmp_path / "embed.gguf")])
    pool = build_pool(args)
    with TestClient(create_app(pool, server_config(args))) as client:
        assert pool.slots[1].served is None
        show = client.post("/api/show", json={"model": "embed"}).json()
        (tag,) = [m for m in client.get("/api/tags").json()["models"] if m["name"] == "embed:latest"]
        assert pool.slots[1].served is None  # read from the header, not loaded
        assert show["capabilities"] == ["embedding"] and show["hearth"]["loaded"] is False
        assert show["details"] == tag["details"] and tag["details"]["family"] == "bert"
        assert tag["details"]["parameter_size"] and tag["details"]["quantization_level"] and tag["size"] > 0
        assert show["model_info"]["general.architecture"] == "bert" and show["model_info"]["bert.context_length"] == 64
        client.post("/api/embed", json={"model": "embed", "input": "hello"})
        assert pool.slots[1].served is not None
        loaded = client.post("/api/show", json={"model": "embed"}).json()
        assert (loaded["capabilities"], loaded["details"]) == (show["capabilities"], show["details"])


def test_a_request_s_keep_alive_sets_its_model_s_timer_and_api_ps_says_when():
    """As Ollama's scheduler: a request's keep_alive is how long its model stays once idle, until a later
    request gives another (one that gives none keeps it; negative: forever); the model loads again with the
    server's; /api/ps' expires_at is when it goes (a pinned model: never)."""
    from datetime import datetime

    clock = [1000.0]
    pool = ModelPool([ModelSpec(["first"], pinned=True, max_model_len=4096),
                      ModelSpec(["second"], max_model_len=2048, keep_alive=600)],
                     lambda spec: fake_served(names=spec.names), clock=lambda: clock[0], tick_s=3600)

    def expires() -> dict[str, float]:
        return {m["name"]: datetime.fromisoformat(m["expires_at"].replace("Z", "+00:00")).timestamp()
                for m in client.get("/api/ps").json()["models"]}

    def ask(**kw):
        r = client.post("/api/chat", json={"model": "second", "messages": USER, "stream": False, **kw})
        assert r.status_code == 200, r.text

    with TestClient(create_app(pool)) as client:
        ask()
        now = time.time()
        assert expires()["first:latest"] > now + 1e9  # never, as Ollama's keep_alive -1 reads
        assert abs(expires()["second:latest"] - (now + 600)) < 5  # the server's keep-alive for it
        ask(keep_alive="1h")
        assert abs(expires()["second:latest"] - (time.time() + 3600)) < 5
        ask()  # none given: it keeps the last one
        assert abs(expires()["second:latest"] - (time.time() + 3600)) < 5
        client.post("/api/embed", json={"model": "second", "input": "", "keep_alive": 90})  # a number: seconds
        assert abs(expires()["second:latest"] - (time.time() + 90)) < 5
        ask(keep_alive=-1)
        assert expires()["second:latest"] > time.time() + 1e9
        ask(keep_alive="2m")
        client.portal.call(pool.check_idle)  # the first check that sees it idle starts its timer
        clock[0] += 119
        client.portal.call(pool.check_idle)
        assert "second:latest" in expires()
        clock[0] += 1
        client.portal.call(pool.check_idle)
        assert "second:latest" not in expires() and pool.slots[1].served is None
        ask()  # loaded again: the server's keep-alive again
        assert abs(expires()["second:latest"] - (time.time() + 600)) < 5


@pytest.mark.parametrize("value, seconds", [(300, 300), (2.5, 2.5), ("300", 300), ("5m", 300), ("1h30m", 5400),
                                            ("250ms", 0.25), ("1m0.5s", 60.5), (-1, math.inf), ("-1", math.inf),
                                            ("-5m", math.inf), ("0", 0), ("-0s", 0),
                                            (10**400, math.inf)])  # no float: float() of it raised, a 500
def test_durations_read_as_go_reads_them(value, seconds):
    from hearth.api.durations import seconds as read

    assert read(value) == seconds
