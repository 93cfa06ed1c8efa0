"""Content, tool calls and reasoning through both APIs, whole and streamed, on a scripted engine
(tests/server/fakes.py) driven by the official SDKs: the wire shapes clients parse."""

from __future__ import annotations

import json

import pytest

from hearth.api.parsing import anthropic_stop, openai_finish
from tests.server.fakes import SCRIPTS

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
A_WEATHER = {"name": "get_weather", "description": "weather in a city",
             "input_schema": WEATHER["function"]["parameters"]}


def chat(fake, script: str, **kw):
    return fake.openai.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": f"script:{script}"}], **kw)


def stream_chat(fake, script: str, **kw) -> list:
    return list(chat(fake, script, stream=True, **kw))


def message(fake, script: str, **kw):
    return fake.anthropic.messages.create(model="fake-model", max_tokens=64,
                                          messages=[{"role": "user", "content": f"script:{script}"}], **kw)


def stream_message(fake, script: str, **kw):
    with fake.anthropic.messages.stream(model="fake-model", max_tokens=64,
                                        messages=[{"role": "user", "content": f"script:{script}"}], **kw) as s:
        events = [e.type for e in s]
        return s.get_final_message(), events


def test_plain_chat_and_usage(fake):
    r = chat(fake, "hello")
    assert r.choices[0].message.content == "Hello there!" and r.choices[0].finish_reason == "stop"
    assert r.object == "chat.completion" and r.model == "fake-model"
    assert r.usage.prompt_tokens == len(fake.last.prompt) and r.usage.completion_tokens == 4
    assert r.usage.total_tokens == r.usage.prompt_tokens + 4


def test_stream_role_deltas_finish_usage_done(fake):
    fake.engine.cached = 16
    chunks = stream_chat(fake, "hello", stream_options={"include_usage": True})
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello there!"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 4
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 16
    assert all(c.usage is None for c in chunks[:-1])
    raw = fake.client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "stream": True})
    assert raw.headers["content-type"].startswith("text/event-stream")
    assert raw.text.endswith("data: [DONE]\n\n")


def test_tool_call_whole(fake):
    r = chat(fake, "tool", tools=[WEATHER])
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me check."
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    assert json.loads(call.function.arguments) == {"city": "Paris"}


OFF = {"extra_body": {"hearth": {"tool_guard": "off"}}}
"""The parse-only server: calls stream as they are written (the guard sends each once it validated)."""


def test_tool_call_streamed(fake):
    chunks = stream_chat(fake, "tool", tools=[WEATHER], **OFF)
    deltas = [c.choices[0].delta for c in chunks]
    calls = [tc for d in deltas for tc in d.tool_calls or []]
    # OpenAI's way: the first delta has the id and name, the next ones only arguments
    assert calls[0].index == 0 and calls[0].id and calls[0].function.name == "get_weather"
    assert calls[0].function.arguments == "" and all(c.id is None and c.index == 0 for c in calls[1:])
    assert json.loads("".join(c.function.arguments for c in calls)) == {"city": "Paris"}
    assert "".join(d.content or "" for d in deltas) == "Let me check."
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_two_calls_get_their_indices(fake):
    r = chat(fake, "two_tools", tools=[WEATHER])
    assert [json.loads(c.function.arguments)["city"] for c in r.choices[0].message.tool_calls] == ["Paris", "Rome"]
    assert r.choices[0].message.content is None
    streamed = [tc for c in stream_chat(fake, "two_tools", tools=[WEATHER]) for tc in c.choices[0].delta.tool_calls or []]
    assert [tc.index for tc in streamed if tc.id] == [0, 1]


@pytest.mark.parametrize("legacy", [False, True])
def test_call_arguments_stream_as_they_are_written(fake, legacy):
    """Each piece of the model's arguments goes out when it arrives; joined, they are the call's
    final arguments (the same string a whole response gives)."""
    kw = {"functions": [WEATHER["function"]]} if legacy else {"tools": [WEATHER]}
    kw |= OFF
    whole = chat(fake, "tool_pieces", **kw).choices[0].message
    args = (whole.function_call if legacy else whole.tool_calls[0].function).arguments
    deltas = [c.choices[0].delta for c in stream_chat(fake, "tool_pieces", **kw)]
    pieces = [d.function_call if legacy else d.tool_calls[0].function for d in deltas
              if (d.function_call if legacy else d.tool_calls)]
    assert pieces[0].name == "get_weather" and pieces[0].arguments == ""
    assert len(pieces) >= 4 and "".join(p.arguments for p in pieces) == args
    assert json.loads(args) == {"city": "Paris", "days": 3}


def test_malformed_call_is_rescued(fake):
    r = chat(fake, "bad_tool", tools=[WEATHER])  # single quotes, `args`, trailing commas
    (call,) = r.choices[0].message.tool_calls
    assert json.loads(call.function.arguments) == {"city": "Oslo"}


@pytest.mark.parametrize("stream", [False, True])
def test_unparseable_call_is_plain_text_not_500(fake, stream):
    if stream:
        chunks = stream_chat(fake, "broken_tool", tools=[WEATHER])
        text = "".join(c.choices[0].delta.content or "" for c in chunks)
        finish = chunks[-1].choices[0].finish_reason
    else:
        choice = chat(fake, "broken_tool", tools=[WEATHER]).choices[0]
        text, finish = choice.message.content, choice.finish_reason
        assert choice.message.tool_calls is None
    assert '"get_weather"' in text and finish == "stop"


def test_no_tools_means_no_parsing(fake):
    r = chat(fake, "tool")
    assert r.choices[0].message.tool_calls is None and "<tool_call>" in r.choices[0].message.content


def test_reasoning_split_whole_and_streamed(fake):
    msg = chat(fake, "think").choices[0].message
    assert msg.content == "Hi!"
    assert msg.reasoning_content == msg.reasoning == "The user wants a greeting."
    deltas = [c.choices[0].delta for c in stream_chat(fake, "think")]
    assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == "The user wants a greeting."
    assert "".join(getattr(d, "reasoning", None) or "" for d in deltas) == "The user wants a greeting."
    assert "".join(d.content or "" for d in deltas) == "Hi!"


@pytest.mark.parametrize("stream", [False, True])
def test_chat_usage_counts_reasoning_tokens_as_responses_does(fake, monkeypatch, stream):
    """Chat completions' usage had no completion_tokens_details.reasoning_tokens (OpenAI's shape) where
    /v1/responses reported them: the same count (the reasoning's text in tokens), where the answer reasoned."""
    monkeypatch.setitem(SCRIPTS, "brief_think", ["<think>", "ok", "</think>", "Hi", " there", "!"])

    def usage(script):
        if not stream:
            return chat(fake, script).usage
        return stream_chat(fake, script, stream_options={"include_usage": True})[-1].usage

    u = usage("brief_think")
    assert (u.completion_tokens, u.completion_tokens_details.reasoning_tokens) == (6, 2)
    r = fake.openai.responses.create(model="fake-model", input="script:brief_think")
    assert r.usage.output_tokens_details.reasoning_tokens == 2
    assert usage("hello").completion_tokens_details is None


def test_unclosed_reasoning_is_all_reasoning(fake):
    msg = chat(fake, "unclosed_think").choices[0].message
    assert msg.reasoning_content == "still thinking" and not msg.content


def test_anthropic_text_and_usage(fake):
    fake.engine.cached = 8
    m = message(fake, "hello")
    assert m.content[0].type == "text" and m.content[0].text == "Hello there!"
    assert m.stop_reason == "end_turn" and m.role == "assistant" and m.type == "message"
    assert m.usage.output_tokens == 4 and m.usage.cache_read_input_tokens == 8
    assert m.usage.input_tokens + 8 == len(fake.last.prompt)


def test_anthropic_stream_events(fake):
    final, events = stream_message(fake, "hello")
    assert events[0] == "message_start" and events[-1] == "message_stop"
    assert {"content_block_start", "content_block_stop", "message_delta"} <= set(events)
    assert final.content[0].text == "Hello there!" and final.stop_reason == "end_turn"
    raw = fake.client.post("/v1/messages", json={"model": "fake-model", "max_tokens": 8, "stream": True,
                                                 "messages": [{"role": "user", "content": "hi"}]}).text
    assert raw.startswith("event: message_start\n") and "event: ping\n" in raw and raw.rstrip().endswith('{"type":"message_stop"}')


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_thinking_and_tool_use(fake, stream):
    m = stream_message(fake, "think_tool", tools=[A_WEATHER])[0] if stream else message(fake, "think_tool", tools=[A_WEATHER])
    assert [b.type for b in m.content] == ["thinking", "tool_use"]
    assert m.content[0].thinking == "Need weather."
    assert m.content[1].name == "get_weather" and m.content[1].input == {"city": "Paris"}
    assert m.content[1].id.startswith("toolu_") and m.stop_reason == "tool_use"


def test_finish_reason_mapping():
    assert anthropic_stop("stop", False, "END") == "stop_sequence"
    assert anthropic_stop("stop", False, 2) == "end_turn"
    assert anthropic_stop("length", True, None) == "max_tokens"
    assert openai_finish("length", True) == "length" and openai_finish("stop", True) == "tool_calls"


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "script:fail"}], "stream": True}),
    ("/v1/completions", {"prompt": "script:fail", "stream": True}),
])
def test_engine_error_mid_stream_openai(fake, path, body):
    r = fake.client.post(path, json=body)
    assert r.status_code == 200
    events = [e for e in r.text.split("\n\n") if e]
    assert json.loads(events[-2][len("data: "):])["error"]["message"].startswith("engine step failed")
    assert events[-1] == "data: [DONE]"


def test_engine_error_mid_stream_anthropic(fake):
    r = fake.client.post("/v1/messages", json={"max_tokens": 8, "stream": True,
                                               "messages": [{"role": "user", "content": "script:fail"}]})
    last = [e for e in r.text.split("\n\n") if e][-1]
    assert last.startswith("event: error\n") and '"type":"api_error"' in last


def test_engine_error_whole_is_500_shaped(fake):
    r = fake.client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "script:fail"}]})
    assert r.status_code == 500 and "engine step failed" in r.json()["error"]["message"]


def test_parallel_tool_calls_false_keeps_the_first(fake):
    r = chat(fake, "two_tools", tools=[WEATHER], parallel_tool_calls=False)
    assert [json.loads(c.function.arguments)["city"] for c in r.choices[0].message.tool_calls] == ["Paris"]
    chunks = stream_chat(fake, "two_tools", tools=[WEATHER], parallel_tool_calls=False)
    streamed = [tc for c in chunks for tc in c.choices[0].delta.tool_calls or []]
    assert len([tc for tc in streamed if tc.id]) == 1 and {tc.index for tc in streamed} == {0}


def test_fenced_call_in_content_is_rescued(fake):
    (call,) = chat(fake, "fenced_tool", tools=[WEATHER]).choices[0].message.tool_calls
    assert json.loads(call.function.arguments) == {"city": "Lima"}


LEGACY_WEATHER = WEATHER["function"]


@pytest.mark.parametrize("stream", [False, True])
def test_legacy_functions_answer_with_function_call(fake, stream):
    """Pre-tools clients: `functions` in, `function_call` out (one call), finish_reason function_call."""
    if not stream:
        r = chat(fake, "two_tools", functions=[LEGACY_WEATHER])
        choice = r.choices[0]
        assert choice.finish_reason == "function_call" and choice.message.tool_calls is None
        assert choice.message.function_call.name == "get_weather"
        assert json.loads(choice.message.function_call.arguments) == {"city": "Paris"}  # the first call only
        return
    chunks = stream_chat(fake, "two_tools", functions=[LEGACY_WEATHER])
    calls = [c.choices[0].delta.function_call for c in chunks if c.choices[0].delta.function_call]
    assert calls[0].name == "get_weather" and all(c.name is None for c in calls[1:])  # one call: name, then arguments
    assert json.loads("".join(c.arguments for c in calls)) == {"city": "Paris"}
    assert not any(c.choices[0].delta.tool_calls for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "function_call"


def test_legacy_function_history_and_forced_call(fake):
    """A history with an assistant function_call and a `function` result renders as a call and its
    result; function_call {"name"} forces that function like a named tool_choice."""
    history = [{"role": "user", "content": "weather?"},
               {"role": "assistant", "content": None, "function_call": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}},
               {"role": "function", "name": "get_weather", "content": "sunny, 21C"},
               {"role": "user", "content": "script:hello"}]
    r = fake.openai.chat.completions.create(model="fake-model", messages=history, functions=[LEGACY_WEATHER])
    assert r.choices[0].message.content == "Hello there!"
    assert '"city": "Oslo"' in fake.last.prompt and "sunny, 21C" in fake.last.prompt
    fake.openai.chat.completions.create(model="fake-model", messages=history, functions=[LEGACY_WEATHER],
                                        function_call={"name": "get_weather"})
    assert fake.last.params.structured_output is not None  # the call is forced by a grammar


@pytest.mark.parametrize("body, param", [
    ({"functions": [{"description": "no name"}]}, "functions[0].name"),
    ({"functions": [LEGACY_WEATHER], "function_call": {"nom": "x"}}, "function_call.name"),
    ({"functions": [LEGACY_WEATHER], "function_call": {"name": "nope"}}, "function_call"),
    ({"messages": [{"role": "function", "content": "x"}]}, "messages[0].name"),
])
def test_legacy_function_bad_input_is_a_400_naming_the_field(fake, body, param):
    payload = {"messages": [{"role": "user", "content": "hi"}], **body}
    r = fake.client.post("/v1/chat/completions", json=payload)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.json()


def _sse(text: str) -> list[dict]:
    return [json.loads(e.split("\ndata: ", 1)[1]) for e in text.split("\n\n") if "\ndata: " in e]


def test_anthropic_stream_start_and_delta_agree_on_usage(fake):
    """message_start's usage is the engine's once known (the first output), as message_delta's:
    input_tokens without the prefix-cache reads."""
    fake.engine.cached = 16
    raw = fake.client.post("/v1/messages", json={"model": "fake-model", "max_tokens": 8, "stream": True,
                                                 "messages": [{"role": "user", "content": "script:hello"}]}).text
    events = _sse(raw)
    start, delta = events[0]["message"]["usage"], next(e for e in events if e["type"] == "message_delta")["usage"]
    assert events[0]["type"] == "message_start" and events[1]["type"] == "ping"
    assert start["cache_read_input_tokens"] == delta["cache_read_input_tokens"] == 16
    assert start["input_tokens"] == delta["input_tokens"] == len(fake.last.prompt) - 16
    assert start["output_tokens"] == 0 and delta["output_tokens"] == 4


def test_anthropic_stream_of_a_cut_call_sends_its_text(fake):
    """A call max_tokens cut (hearth.tool_parsers.cut): its input_json_delta is what the model wrote."""
    tool = {"name": "get_time", "input_schema": {"type": "object", "properties": {"tz": {"type": "string"}}}}
    raw = fake.client.post("/v1/messages", json={
        "model": "fake-model", "max_tokens": 7, "stream": True, "tools": [tool], "tool_choice": {"type": "tool", "name": "get_time"},
        "messages": [{"role": "user", "content": "script:cut_call"}]}).text
    events = _sse(raw)
    (block,) = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    pieces = "".join(e["delta"]["partial_json"] for e in events if e["type"] == "content_block_delta")
    assert block["type"] == "tool_use" and block["name"] == "get_time" and pieces == '{"tz": "Asia/To'
    assert next(e for e in events if e["type"] == "message_delta")["delta"]["stop_reason"] == "max_tokens"


@pytest.mark.parametrize("mode", ["off", "guard"])
def test_anthropic_whole_cut_call_is_no_tool_use_with_an_invented_input(fake, mode):
    """Whole, a cut call has no `input` object to give (`{}` would be a clean call with no arguments):
    no tool_use block; the `hearth` field's unparsed_tool_use has what the stream's partial_json sends."""
    tool = {"name": "get_time", "input_schema": {"type": "object", "properties": {"tz": {"type": "string"}}}}
    r = fake.client.post("/v1/messages", json={
        "model": "fake-model", "max_tokens": 7, "tools": [tool], "tool_choice": {"type": "tool", "name": "get_time"},
        "messages": [{"role": "user", "content": "script:cut_call"}], "hearth": {"tool_guard": mode}}).json()
    assert r["content"] == [] and r["stop_reason"] == "max_tokens"
    (cut,) = r["hearth"]["unparsed_tool_use"]
    assert cut["id"].startswith("toolu_") and cut["name"] == "get_time" and cut["partial_json"] == '{"tz": "Asia/To'
    assert "max_tokens" in cut["error"]
