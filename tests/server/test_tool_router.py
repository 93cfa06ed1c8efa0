"""A small model routing tool calls (issue 21, point 3), on scripted fake engines: a single-turn
request with tools goes to the small model first (in `auto` under the lazy call grammar, keeping its
own choice between text and a call; forced when the client requires a call); its call is the answer
at or above the threshold, else the main model answers and the client never sees the small model's
tokens; a small model that begins in text is stopped there; a call the decline gate drops falls
back; prose requests skip it; the `hearth.router` field, /metrics, per-request overrides and bad
input. The fake stream gives every token logprob -0.5, so a call's confidence is exp(-0.5) = 0.606531."""

from __future__ import annotations

import json
import math

import pytest
from starlette.testclient import TestClient

from hearth.api.app import ServerConfig, create_app
from hearth.api.model_pool import ModelPool
from hearth.tool_guard.routing import RouterConfig
from tests.server.fakes import WEATHER_CALL, FakeEngine, fake_served

CONFIDENCE = round(math.exp(-0.5), 6)
OSLO_CALL = WEATHER_CALL.replace("Paris", "Oslo")
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
ASK = [{"role": "user", "content": "weather in Oslo?"}]


class Says(FakeEngine):
    """A fake engine that says `pieces` whatever the prompt."""

    def __init__(self, *pieces: str, max_model_len: int = 4096):
        super().__init__(max_model_len)
        self.pieces = list(pieces)

    def add_request(self, prompt_ids, params, request_id=None, media=()):
        stream = super().add_request(prompt_ids, params, request_id)
        stream.pieces = self.pieces
        return stream


@pytest.fixture
def make():
    clients = []

    def build(small_says=(OSLO_CALL,), threshold: float | None = 0.5, small_context: int = 4096,
              server: ServerConfig | None = None, tool_floor: float = 0.0):
        main, small = Says("It is sunny."), Says(*small_says, max_model_len=small_context)
        routers = {"main": RouterConfig("small", threshold, tool_floor)} if threshold is not None else {}
        pool = ModelPool.of([fake_served(engine=main, names=("main",)), fake_served(engine=small, names=("small",))],
                            routers)
        client = TestClient(create_app(pool, server or ServerConfig()), raise_server_exceptions=False)
        client.__enter__()
        clients.append(client)
        return client, main, small

    yield build
    for c in clients:
        c.__exit__(None, None, None)


def chat(client, messages=ASK, tools=TOOLS, **extra):
    body = {"model": "main", "messages": messages, **({"tools": tools} if tools else {}), **extra}
    return client.post("/v1/chat/completions", json=body)


def test_a_sure_call_of_the_small_model_is_the_answer(make):
    client, main, small = make(threshold=0.5)
    r = chat(client)
    assert r.status_code == 200, r.text
    body = r.json()
    (call,) = body["choices"][0]["message"]["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Oslo"}'}
    assert body["choices"][0]["finish_reason"] == "tool_calls" and body["model"] == "main"
    router = body["hearth"]["router"]
    assert router["decision"] == "accepted" and router["model"] == "small"
    assert router["confidence"] == CONFIDENCE and router["threshold"] == 0.5
    assert main.added == []  # the main model never ran
    (probe,) = small.added
    assert "[lazy]" in probe.params.structured_output.grammar  # auto: free until it opens a call


def test_an_unsure_call_falls_back_to_the_main_model(make):
    client, main, small = make(threshold=0.7)
    body = chat(client).json()
    msg = body["choices"][0]["message"]
    assert msg["content"] == "It is sunny." and not msg.get("tool_calls")
    router = body["hearth"]["router"]
    assert (router["decision"], router["reason"], router["confidence"]) == ("fallback", "low_confidence", CONFIDENCE)
    assert len(small.added) == 1 and len(main.added) == 1
    # the main model answers as it always did: not under the small model's forced call
    assert main.added[0].params.structured_output != small.added[0].params.structured_output


@pytest.mark.parametrize("threshold,decision", [(0.5, "accepted"), (0.7, "fallback")])
def test_streamed_the_client_sees_the_small_models_call_only_when_accepted(make, threshold, decision):
    client, main, small = make(threshold=threshold)
    with client.stream("POST", "/v1/chat/completions",
                       json={"model": "main", "messages": ASK, "tools": TOOLS, "stream": True}) as r:
        raw = "".join(r.iter_text())
    chunks = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
    assert ("Oslo" in raw) == (decision == "accepted")
    (last,) = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert last["hearth"]["router"]["decision"] == decision
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == ("" if decision == "accepted" else "It is sunny.")


@pytest.mark.parametrize("messages,tools,extra,reason", [
    (ASK, None, {}, "no_tools"),
    (ASK, TOOLS, {"tool_choice": "none"}, "tool_choice_none"),
    (ASK + [{"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "Oslo"}'}}]}, {"role": "tool", "tool_call_id": "c1",
                                                                      "content": "sunny"}], TOOLS, {}, "multi_turn"),
    (ASK, TOOLS, {"n": 2}, "n"),
    (ASK, TOOLS, {"logprobs": True}, "token_level"),
    (ASK, TOOLS, {"prompt_logprobs": 1}, "token_level"),  # the main model's prompt, as vLLM's
    (ASK, TOOLS, {"response_format": {"type": "json_object"}}, "response_format"),
])
def test_requests_that_need_prose_skip_the_router(make, messages, tools, extra, reason):
    client, main, small = make(threshold=0.0)
    body = chat(client, messages, tools, **extra).json()
    assert body["hearth"]["router"] == {"model": "small", "decision": "skipped", "threshold": 0.0,
                                        "confidence": None, "reason": reason}
    assert small.added == [] and main.added


def test_a_small_model_that_begins_in_text_is_stopped_there_and_the_main_model_answers(make):
    client, main, small = make(small_says=("I cannot", " check the weather", " for you."), threshold=0.0)
    body = chat(client).json()
    router = body["hearth"]["router"]
    assert (router["decision"], router["reason"], router["confidence"]) == ("fallback", "text", None)
    assert router["completion_tokens"] == 1 and small.aborted == [small.added[0].request_id]  # its first words only
    assert body["choices"][0]["message"]["content"] == "It is sunny." and len(main.added) == 1


def test_a_required_call_is_forced_from_the_first_token(make):
    client, main, small = make(threshold=0.5)
    body = chat(client, tool_choice="required").json()
    grammar = small.added[0].params.structured_output.grammar
    assert "[lazy]" not in grammar and grammar.startswith('start: "<tool_call>')
    assert body["hearth"]["router"]["decision"] == "accepted" and main.added == []


@pytest.mark.parametrize("script,threshold,decision,reason", [
    ("router_unsure_opener", 0.5, "fallback", "low_confidence"),  # opener at exp(-2) = 0.135
    ("router_unsure_opener", 0.1, "accepted", ""),
    ("guard_forced_name", 0.0, "fallback", "declined"),  # the grammar chose the tool: raw exp(-6)
    ("guard_sure_name", 0.0, "accepted", ""),
])
def test_the_opener_and_the_name_are_the_small_models_intent(make, script, threshold, decision, reason):
    """The opener is sampled before any grammar, so its probability (the model's intent to call)
    bounds the call's confidence; a name the lazy grammar bent is declined (NAME_FLOOR)."""
    says = {"router_unsure_opener": ("<tool_call>", OSLO_CALL.removeprefix("<tool_call>")),
            "guard_forced_name": ('```json\n{"name": "', "get_weather", '", "arguments": {"city": "Oslo"}}\n```')}
    client, main, small = make(small_says=says.get(script, says["guard_forced_name"]), threshold=threshold)
    body = chat(client, [{"role": "user", "content": f"weather in Oslo? script:{script}"}]).json()
    router = body["hearth"]["router"]
    assert (router["decision"], router.get("reason", "")) == (decision, reason), router
    if script == "router_unsure_opener":
        assert router["confidence"] == round(math.exp(-2.0), 6)
    msg = body["choices"][0]["message"]
    if decision == "accepted":
        assert json.loads(msg["tool_calls"][0]["function"]["arguments"]) == {"city": "Oslo"} and main.added == []
    else:
        assert msg["content"] == "It is sunny." and not msg.get("tool_calls")


def test_an_invalid_call_falls_back_whatever_its_confidence(make):
    client, main, small = make(small_says=(OSLO_CALL.replace("get_weather", "get_wether"),), threshold=0.0)
    body = chat(client).json()
    assert body["hearth"]["router"]["reason"] == "invalid_call"
    assert body["choices"][0]["message"]["content"] == "It is sunny."


def test_a_prompt_the_small_model_cannot_take_falls_back_to_the_main_model(make):
    client, main, small = make(threshold=0.0, small_context=600)  # above PROBE_MAX_TOKENS: the prompt is what fails
    question = [{"role": "user", "content": "weather in Oslo? " + "Tell me in detail. " * 40}]  # ~800 tokens
    r = chat(client, question)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["choices"][0]["message"]["content"] == "It is sunny."
    router = body["hearth"]["router"]
    assert router["decision"] == "fallback" and router["model"] == "small"
    assert router["reason"].startswith("small_failed: prompt is ") and "the context holds 600" in router["reason"]
    assert router["confidence"] is None and small.added == [] and len(main.added) == 1
    assert chat(client).json()["hearth"]["router"]["decision"] == "accepted"  # a short prompt still routes
    line = ('hearth:router_requests_total{decision="fallback",model_name="main",reason="small_failed",'
            'router="small"} 1.0')
    assert line in client.get("/metrics").text


def test_max_tokens_past_the_main_models_context_is_a_400_before_routing(make):
    """The main model's room check runs before the small model is asked: the same 400 as without a
    router, on every route that routes (the small model's answer would hide it)."""
    client, main, small = make(threshold=0.5)
    plain, _, _ = make(threshold=None)
    for stream in (False, True):
        with_router, without = chat(client, max_tokens=4095, stream=stream), chat(plain, max_tokens=4095, stream=stream)
        assert with_router.status_code == without.status_code == 400, with_router.text
        assert with_router.json() == without.json()
    assert "max_tokens: this model's maximum context length is 4096" in without.json()["error"]["message"]
    tools = [{"name": "get_weather", "input_schema": TOOLS[0]["function"]["parameters"]}]
    r = client.post("/v1/messages", json={"model": "main", "max_tokens": 4095, "messages": ASK, "tools": tools})
    assert r.status_code == 400 and "max_tokens: this model's maximum context length" in r.json()["error"]["message"]
    r = client.post("/v1/responses", json={"model": "main", "input": "weather in Oslo?", "max_output_tokens": 4095,
                                           "tools": [{"type": "function", "name": "get_weather",
                                                      "parameters": TOOLS[0]["function"]["parameters"]}]})
    assert r.status_code == 400 and "max_output_tokens: this model's maximum" in r.json()["error"]["message"]
    assert small.added == [] and main.added == []
    assert chat(client, max_tokens=64).json()["hearth"]["router"]["decision"] == "accepted"  # room left: routed


def test_per_request_router_and_threshold(make):
    client, main, small = make(threshold=None)  # no router configured
    assert "router" not in chat(client).json()["hearth"] and small.added == []
    body = chat(client, hearth={"router": "small", "router_threshold": 0.6}).json()
    assert body["hearth"]["router"]["decision"] == "accepted" and body["hearth"]["router"]["threshold"] == 0.6
    client, main, small = make(threshold=0.5)
    body = chat(client, hearth={"router": False}).json()
    assert "router" not in body.get("hearth", {}) and small.added == []
    body = chat(client, hearth={"router_threshold": 0.9}).json()
    assert body["hearth"]["router"]["decision"] == "fallback"


@pytest.mark.parametrize("hearth,needle", [
    ({"router": "tiny"}, "hearth.router: unknown model 'tiny'; this server serves 'main', 'small'"),
    ({"router": 3}, "hearth.router: must be a model's name or false"),
    ({"router_threshold": 1.5}, "hearth.router_threshold: must be a number in [0, 1], got 1.5"),
    ({"router_tool_floor": -0.1}, "hearth.router_tool_floor: must be a number in [0, 1], got -0.1"),
])
def test_bad_router_fields_are_400_naming_them(make, hearth, needle):
    client, main, small = make()
    r = chat(client, hearth=hearth)
    assert r.status_code == 400 and needle in r.json()["error"]["message"], r.text
    assert r.json()["error"]["param"].startswith("hearth.router")


def test_metrics_count_routed_and_fallback(make):
    client, main, small = make(threshold=0.5)
    chat(client)
    chat(client, hearth={"router_threshold": 0.9})
    chat(client, tools=None)
    text = client.get("/metrics").text
    for decision, reason in (("accepted", ""), ("fallback", "low_confidence"), ("skipped", "no_tools")):
        line = (f'hearth:router_requests_total{{decision="{decision}",model_name="main",reason="{reason}",'
                f'router="small"}} 1.0')
        assert line in text, text


def test_anthropic_and_responses_take_the_same_path(make):
    client, main, small = make(threshold=0.5)
    tools = [{"name": "get_weather", "input_schema": TOOLS[0]["function"]["parameters"]}]
    r = client.post("/v1/messages", json={"model": "main", "max_tokens": 64, "messages": ASK, "tools": tools})
    body = r.json()
    assert [b["type"] for b in body["content"]] == ["tool_use"] and body["content"][0]["input"] == {"city": "Oslo"}
    assert body["hearth"]["router"]["decision"] == "accepted" and body["stop_reason"] == "tool_use"
    r = client.post("/v1/responses", json={"model": "main", "input": "weather in Oslo?", "tools": [
        {"type": "function", "name": "get_weather", "parameters": TOOLS[0]["function"]["parameters"]}]})
    body = r.json()
    assert [i["type"] for i in body["output"]] == ["function_call"] and body["hearth"]["router"]["decision"] == "accepted"
    assert main.added == []


TWO_TOOLS = TOOLS + [{"type": "function", "function": {"name": "get_wind", "parameters": TOOLS[0]["function"]["parameters"]}}]
NAMED_CALL = ('<tool_call>\n{"name": "', "get_w", "eather", '", "arguments": {', '"city": "Oslo"}}', "\n</tool_call>")
FENCED_CALL = ('```json\n{"name": "', "get_weather", '", "arguments": {', '"city": "Oslo"}}', "\n```")


@pytest.mark.parametrize("script,says,threshold,floor,decision,reason,tokens,at_name", [
    # `eather` decides get_weather over get_wind at exp(-2) = 0.135: stopped there, 3 tokens of 6
    ("router_unsure_name", NAMED_CALL, 0.5, None, "fallback", "low_confidence", 3, True),
    # above the threshold but torn between get_weather and get_wind (below a tool floor)
    ("router_unsure_name", NAMED_CALL, 0.1, 0.95, "fallback", "unsure_tool", 3, True),
    # sure of the tool: the call is written whole
    ("router_sure_name", NAMED_CALL, 0.5, 0.95, "accepted", "", 6, False),
    # the grammar chose the tool (raw exp(-6) < NAME_FLOOR): declined at the name, 2 tokens of 5
    ("guard_forced_name", FENCED_CALL, 0.0, None, "fallback", "declined", 2, True),
    # a sure name, an unsure argument: past the name, stopped at that argument (5 tokens of 6)
    ("router_unsure_arguments", NAMED_CALL, 0.5, None, "fallback", "low_confidence", 5, False),
])
def test_a_call_is_judged_at_its_tools_name(make, script, says, threshold, floor, decision, reason, tokens, at_name):
    client, main, small = make(small_says=says, threshold=threshold)
    tools = TOOLS if script == "guard_forced_name" else TWO_TOOLS
    ext = {} if floor is None else {"hearth": {"router_tool_floor": floor}}
    body = chat(client, [{"role": "user", "content": f"weather in Oslo? script:{script}"}], tools, **ext).json()
    router = body["hearth"]["router"]
    assert (router["decision"], router.get("reason", "")) == (decision, reason), router
    assert router["completion_tokens"] == tokens
    stopped = tokens < len(says)
    assert router["stopped"] == at_name and (small.aborted == [small.added[0].request_id]) == stopped
    name_conf = round(math.exp(-2.0), 6) if script == "router_unsure_name" else CONFIDENCE
    assert router["name_confidence"] == name_conf and router["name_s"] <= router["latency_s"]
    # the name's tokens alone (None: one tool offered, no choice made)
    tool_prob = {"router_unsure_name": name_conf, "guard_forced_name": None}.get(script, round(math.exp(-0.01), 6))
    assert router["name"] == "get_weather" and router["tool_prob"] == tool_prob
    assert router["confidence"] == (round(math.exp(-2.0), 6) if "unsure" in script else name_conf)
    msg = body["choices"][0]["message"]
    if decision == "accepted":
        assert json.loads(msg["tool_calls"][0]["function"]["arguments"]) == {"city": "Oslo"} and main.added == []
    else:
        assert msg["content"] == "It is sunny." and not msg.get("tool_calls") and len(main.added) == 1


CITY_CALL = ('<tool_call>\n{"name": "', "get_weather", '", "arguments": {', '"city": "', "Os", "lo", '"}}',
             "\n</tool_call>")
CITY_LOGPROBS = [-0.5, -0.01, -0.5, -0.5, -2.0, -0.5, -0.5, -0.5]
"""tests/server/fakes.py's LOGPROBS for router_unsure_city, piece by piece (one token each): the
opener 0.607, the name 0.990, `Os` 0.135."""


def test_the_small_model_is_aborted_at_the_first_token_under_the_threshold(make):
    """Written whole (threshold 0: nothing stops it), the call's confidence is 0.135 (`Os`); at any
    threshold the routed decision is the one that whole call gets, but a fallback stops the small
    model at the first token that took the confidence so far under the threshold (the opener
    0.607 or `Os` 0.135), and the main model answers."""
    ask = [{"role": "user", "content": "weather in Oslo? script:router_unsure_city"}]
    client, main, small = make(small_says=CITY_CALL, threshold=0.0)
    whole = chat(client, ask).json()["hearth"]["router"]
    lowest = round(math.exp(-2.0), 6)
    assert (whole["decision"], whole["confidence"], whole["completion_tokens"]) == ("accepted", lowest, 8)
    assert [c for c, _ in whole["lows"]] == [CONFIDENCE, lowest] and small.aborted == []
    for threshold in (0.1, lowest, 0.2, CONFIDENCE, 0.61, 0.9):
        n_main = len(main.added)
        body = chat(client, ask, hearth={"router_threshold": threshold}).json()
        router, msg = body["hearth"]["router"], body["choices"][0]["message"]
        assert router["decision"] == ("accepted" if whole["confidence"] >= threshold else "fallback"), threshold
        generated = router["completion_tokens"]
        if router["decision"] == "accepted":
            assert generated == len(CITY_CALL) and msg["tool_calls"] and len(main.added) == n_main
            continue
        # tokens generated: through the first whose probability is under the threshold, then aborted
        first_low = next(k for k, lp in enumerate(CITY_LOGPROBS) if round(math.exp(lp), 6) < threshold)
        assert generated == first_low + 1 == (1 if threshold > CONFIDENCE else 5), threshold
        assert small.aborted[-1] == small.added[-1].request_id and router["reason"] == "low_confidence"
        assert router["confidence"] == (CONFIDENCE if generated == 1 else lowest)
        assert msg["content"] == "It is sunny." and not msg.get("tool_calls") and len(main.added) == n_main + 1


def test_the_tool_floor_per_request(make):
    client, main, small = make(small_says=NAMED_CALL, threshold=0.1)
    ask = [{"role": "user", "content": "weather in Oslo? script:router_unsure_name"}]  # torn: 0.135
    floor = chat(client, ask, TWO_TOOLS, hearth={"router_tool_floor": 0.95}).json()
    assert floor["hearth"]["router"]["reason"] == "unsure_tool"
    body = chat(client, ask, TWO_TOOLS).json()  # off by default: the threshold alone
    assert body["hearth"]["router"]["decision"] == "accepted" and body["hearth"]["router"]["stopped"] is False


@pytest.mark.parametrize("configured", ["model", "server"])
def test_the_servers_tool_floor_and_the_request_over_it(make, configured):
    """--router-tool-floor reaches a model's router (serve_router.router_configs) or, for a request
    naming its own router, the ServerConfig: a request without hearth.router_tool_floor is judged
    under it; the request's own field still wins."""
    if configured == "model":
        client, main, small = make(small_says=NAMED_CALL, threshold=0.1, tool_floor=0.95)
        extra = {}
    else:
        client, main, small = make(small_says=NAMED_CALL, threshold=None,
                                   server=ServerConfig(router_threshold=0.1, router_tool_floor=0.95))
        extra = {"router": "small"}
    ask = [{"role": "user", "content": "weather in Oslo? script:router_unsure_name"}]  # tool choice read at 0.135
    router = chat(client, ask, TWO_TOOLS, hearth=extra).json()["hearth"]["router"]
    assert (router["decision"], router["reason"], router["stopped"]) == ("fallback", "unsure_tool", True)
    router = chat(client, ask, TWO_TOOLS, hearth={**extra, "router_tool_floor": 0}).json()["hearth"]["router"]
    assert router["decision"] == "accepted" and router["stopped"] is False
