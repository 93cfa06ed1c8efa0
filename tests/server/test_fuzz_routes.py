"""A bounded, seeded fuzz of every JSON route on a real tiny model in process: one field of a valid body at a time
(nested ones too: messages[0].role, options.num_predict, tools[0].function.parameters.required) is replaced by a
value of the wrong type, an integer past int64 or a double, NaN or Infinity (Python's JSON reads them), an empty
string or list, a deep list, a lone surrogate or null. Every answer is a 2xx, or a 4xx in the route's error shape
whose message names the field; never a 5xx; and the engine still answers after it all. The fuzz found each of the
500s in tests/server/test_json_values.py and test_wrong_shapes.py, and the engine step that Ollama's integer
temperature failed (tests/test_bad_input.py)."""

from __future__ import annotations

import copy
import json
import random

import pytest
from starlette.testclient import TestClient

from hearth.api.app import create_app
from hearth.api.served import ServedModel
from hearth.engine.async_engine import AsyncEngine
from hearth.llm import LLM
from tests.gguf_factory import write_tiny_gguf
from tests.server.fakes import TEMPLATE

SEED = 20261207
PER_ROUTE = 24
"""Mutated bodies per route (and as many streamed where the route streams): ~600 requests, seconds."""
USER = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "get", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
CALLED = [*USER, {"role": "assistant", "content": None, "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "get", "arguments": "{\"city\": \"x\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
TOOL_USE = [*USER, {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "sunny"}]}]
ROUTES = {  # route -> a body it answers with a 2xx
    "/v1/chat/completions": {"model": "tiny", "messages": CALLED, "max_tokens": 2, "tools": TOOLS, "top_k": 5,
                             "logit_bias": {"5": 1.0}, "stop": ["x"], "seed": 1, "temperature": 0.5},
    "/v1/completions": {"model": "tiny", "prompt": [1, 2, 3], "max_tokens": 2, "logprobs": 2, "n": 2, "min_p": 0.1},
    "/v1/responses": {"model": "tiny", "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
                      "max_output_tokens": 2, "tools": [{"type": "function", "name": "get", "parameters": {}}],
                      "metadata": {"a": "b"}, "text": {"format": {"type": "text"}}, "reasoning": {"effort": "low"}},
    "/v1/messages": {"model": "tiny", "messages": TOOL_USE, "max_tokens": 2, "system": [{"type": "text", "text": "s"}],
                     "tools": [{"name": "get", "input_schema": {"type": "object"}}], "top_k": 3, "stop_sequences": ["x"]},
    "/v1/messages/count_tokens": {"model": "tiny", "messages": USER, "system": "s"},
    "/completion": {"prompt": "hi", "n_predict": 2, "logit_bias": [[5, 1.0]], "mirostat": 2, "dry_multiplier": 0.5,
                    "dry_sequence_breakers": ["\n"], "stop": ["x"], "repeat_last_n": 8},
    "/infill": {"input_prefix": "def f(", "input_suffix": "\n", "n_predict": 2,
                "input_extra": [{"filename": "a.py", "text": "x = 1"}]},
    "/v1/embeddings": {"model": "tiny", "input": [[1, 2], [3]], "encoding_format": "base64"},
    "/embedding": {"content": "hi", "embd_normalize": 3},
    "/tokenize": {"messages": USER, "tools": TOOLS, "with_pieces": True},
    "/detokenize": {"tokens": [1, 2]},
    "/apply-template": {"messages": CALLED},
    "/api/chat": {"model": "tiny", "messages": [*USER, {"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "get", "arguments": {"city": "x"}}}]}, {"role": "tool", "content": "ok"}],
                  "stream": False, "tools": TOOLS, "keep_alive": "5m", "options": {"num_predict": 2, "top_k": 3,
                                                                                      "temperature": 0.5}},
    "/api/generate": {"model": "tiny", "prompt": "hi", "system": "s", "stream": False, "format": "json",
                      "options": {"num_predict": 2, "seed": 3, "stop": ["x"]}},
    "/api/embed": {"model": "tiny", "input": ["a", "b"]},
    "/api/show": {"model": "tiny"},
}
STREAMS = {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages", "/completion", "/api/chat",
           "/api/generate"}
VALUES = ["x", 1, 1.5, True, [], {}, None, 10**20, -10**20, 2**63, -1, 0, "", [""], [None], [[1]], [10**20],
          {"x": 10**20}, "\ud800", ["\ud800"], 1e300, "@nest", "@nan", "@inf", "@1e400", "@digits"]
RAW = {"@nest": "[" * 40 + "1" + "]" * 40, "@nan": "NaN", "@inf": "-Infinity", "@1e400": "1e400",
       "@digits": "9" * 5000}
"""Values written into the JSON text as they are: no Python value json.dumps writes so."""


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "tiny.gguf"
    write_tiny_gguf(path, "qwen2", fim=True, chat_template=TEMPLATE, context=1024, tied=False)
    llm = LLM(str(path), max_model_len=1024, max_num_batched_tokens=64, progress=False)
    with TestClient(create_app(ServedModel.from_llm(llm, ["tiny"], AsyncEngine(llm.engine))),
                    raise_server_exceptions=False) as c:
        yield c


def paths(body, prefix=()) -> list[tuple]:
    """Every field of `body`, nested ones too, as key/index paths."""
    items = body.items() if isinstance(body, dict) else enumerate(body) if isinstance(body, list) else ()
    out = []
    for k, v in items:
        out += [(*prefix, k), *paths(v, (*prefix, k))]
    return out


def mutated(body: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(body)
    at = out
    for key in path[:-1]:
        at = at[key]
    at[path[-1]] = value
    return out


def post(client, route: str, body: dict):
    text = json.dumps(body)
    for mark, raw in RAW.items():
        text = text.replace(json.dumps(mark), raw)
    return client.post(route, content=text, headers={"content-type": "application/json"})


def error_message(route: str, r) -> str | None:
    """The message of a 4xx in the route's shape (None: not that shape)."""
    body = r.json()
    if route.startswith("/api/"):
        return body.get("error") if isinstance(body.get("error"), str) else None
    error = body.get("error")
    if route.startswith("/v1/messages") and body.get("type") != "error":
        return None
    return error.get("message") if isinstance(error, dict) and isinstance(error.get("message"), str) else None


def param_of(r) -> str | None:
    error = r.json().get("error")
    return error.get("param") if isinstance(error, dict) else None


FAILED = ("internal error", "engine step failed", '"server_error"', '"api_error"', '"engine_error"')
"""What a stream's error event says of a 500 (a stream's status is 200 by then)."""


def cases(route: str) -> list[tuple[tuple, object, bool]]:
    rng = random.Random(f"{SEED}{route}")
    every = [(p, v) for p in paths(ROUTES[route]) for v in VALUES]
    picked = rng.sample(every, min(PER_ROUTE, len(every)))
    return [(p, v, False) for p, v in picked] + [(p, v, True) for p, v in picked if route in STREAMS]


@pytest.mark.parametrize("route", ROUTES)
def test_each_route_s_body_is_answered(client, route):
    """The bodies the fuzz mutates are good ones: its 4xx are about the field it changed."""
    r = post(client, route, ROUTES[route])
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("route", ROUTES)
def test_a_bad_field_is_a_4xx_naming_it_never_a_5xx(client, route):
    wrong = []
    for path, value, stream in cases(route):
        body = mutated(ROUTES[route], path, value)
        if stream and path != ("stream",):
            body["stream"] = True
        r = post(client, route, body)
        where = f"{'.'.join(map(str, path))} = {value!r:.40} (stream {stream}): {r.status_code} {r.text[:300]}"
        if r.status_code >= 500 or any(word in r.text for word in FAILED):
            wrong.append(f"5xx: {where}")
        elif r.status_code >= 400:
            message = error_message(route, r)
            if message is None:
                wrong.append(f"shape: {where}")
            elif str(path[0]) not in message and str(path[0]) != param_of(r):
                wrong.append(f"unnamed: {where}")
    assert not wrong, "\n".join(wrong)


def test_ollama_s_integer_temperature_runs_the_step(client):
    """options.temperature 10**20 reached the sampler as an int: torch.tensor([1.0, 10**20]) overflowed int64 in
    the engine step, a 500 for every request in it."""
    r = client.post("/api/chat", json={"model": "tiny", "messages": USER, "stream": False,
                                       "options": {"num_predict": 2, "temperature": 10**20}})
    assert r.status_code == 200 and r.json()["eval_count"] == 2, r.text


def test_the_engine_answers_after_the_fuzz(client):
    """Runs last in this module: a request the fuzz left in the engine, or a step it failed, shows here."""
    r = client.post("/v1/chat/completions", json={"model": "tiny", "messages": USER, "max_tokens": 3})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 3
