"""The router on a real small model: SmolLM2-135M as the router of a scripted main model, in one
app. Forced (`tool_choice: required`), the small model's call carries a real confidence (the lowest
token probability inside it, from the engine's logprobs under the call grammar); at threshold 0 its
valid call is the answer, at threshold 1 only a call it was certain of, token by token, would be,
and otherwise the main model answers and none of the small model's call reaches the client. (The
second request's prompt is a prefix-cache hit, so its logprobs, and the confidence, differ slightly
from the first's.) In `auto` the small model keeps its own choice: where it answers in text, as it
does alone, the router stops it at its first word and the main model answers."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from hearth.api.app import create_app
from hearth.api.model_pool import ModelPool
from hearth.api.served import ServedModel
from hearth.engine.async_engine import AsyncEngine
from hearth.llm import LLM
from hearth.tool_guard.routing import RouterConfig
from tests.server.fakes import fake_served
from tests.server.test_tool_router import Says

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def client(model_path):
    llm = LLM(str(model_path("smollm2-135m")), progress=False, max_model_len=1024, max_num_seqs=2,
              kv_cache_memory_gb=0.05)
    small = ServedModel.from_llm(llm, ["small"], AsyncEngine(llm.engine))
    main = fake_served(engine=Says("It is sunny."), names=("big",))
    with TestClient(create_app(ModelPool.of([main, small], {"big": RouterConfig("small", 0.5)}))) as c:
        yield c


def test_a_real_small_model_routes_by_its_calls_confidence(client):
    body = {"model": "big", "messages": ASK, "tools": TOOLS, "temperature": 0, "max_tokens": 64,
            "tool_choice": "required"}
    first = client.post("/v1/chat/completions", json={**body, "hearth": {"router_threshold": 0.0}}).json()
    router = first["hearth"]["router"]
    assert router["decision"] == "accepted" and router["model"] == "small", first
    assert 0 < router["confidence"] <= 1 and router["prompt_tokens"] > 0 and first["model"] == "big"
    (call,) = first["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    second = client.post("/v1/chat/completions", json={**body, "hearth": {"router_threshold": 1.0}}).json()
    got = second["hearth"]["router"]
    assert 0 < got["confidence"] <= 1  # close to the first's, not equal: its prompt came from the prefix cache
    assert got["decision"] == ("accepted" if got["confidence"] >= 1.0 else "fallback")
    if got["decision"] == "fallback":
        assert second["choices"][0]["message"]["content"] == "It is sunny."
        assert not second["choices"][0]["message"].get("tool_calls")
    metrics = client.get("/metrics").text
    assert 'hearth:router_requests_total{decision="accepted",model_name="big",reason="",router="small"}' in metrics


def test_in_auto_a_real_small_model_that_would_answer_in_text_hands_over_at_its_first_word(client):
    body = {"messages": ASK, "tools": TOOLS, "temperature": 0, "max_tokens": 64}
    alone = client.post("/v1/chat/completions", json={**body, "model": "small"}).json()["choices"][0]["message"]
    routed = client.post("/v1/chat/completions", json={**body, "model": "big"}).json()
    router = routed["hearth"]["router"]
    if alone.get("tool_calls"):  # it calls on its own: the router takes or weighs that call
        assert router["decision"] == "accepted" or router["reason"] == "low_confidence", routed
        return
    assert alone["content"].strip()  # SmolLM2-135M answers this one in prose
    assert (router["decision"], router["reason"]) == ("fallback", "text"), routed
    assert router["completion_tokens"] <= 2 and routed["choices"][0]["message"]["content"] == "It is sunny."
