"""A gpt-oss (harmony) chat template served on the scripted engine (tests/server/fakes.py): its
analysis channel as reasoning, its final channel as content, its messages to functions.NAME as tool
calls, through both APIs, whole and streamed; a history with calls rendered as the template expects;
a forced call's grammar. The scripts split the markers mid-way, as tokens would not but deltas may."""

from __future__ import annotations

import json

import pytest

from tests.server.fakes import SCRIPTS
from tests.tool_parsers.templates import HARMONY

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
A_WEATHER = {"name": "get_weather", "description": "weather in a city", "input_schema": WEATHER["function"]["parameters"]}
MARKERS = ("<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|constrain|>", "<|call|>", "<|return|>")
HARMONY_SCRIPTS = {
    # <|call|> and <|return|> end generation (EOG): the text stops before them
    "harmony_tool": ["<|chan", "nel|>analysis<|mess", "age|>Need the ", "weather.<|e", "nd|><|start|>assistant<|channel|>",
                     "commentary to=functions.get", "_weather <|constrain|>json<|message|>", '{"city": ', '"Paris"}'],
    "harmony_final": ["<|channel|>analysis<|message|>", "The user wants", " a greeting.", "<|end|><|start|>assistant",
                      "<|channel|>final<|message|>", "Hi", "!"],
    "harmony_role_call": [" to=functions.get_weather<|channel|>commentary json<|message|>", '{"city": "Rome"}'],
}
OFF = {"extra_body": {"hearth": {"tool_guard": "off"}}}


@pytest.fixture
def fake(make_fake, monkeypatch):
    for name, pieces in HARMONY_SCRIPTS.items():
        monkeypatch.setitem(SCRIPTS, name, pieces)
    return make_fake(HARMONY)


def chat(fake, script: str, **kw):
    return fake.openai.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": f"script:{script}"}],
                                               **kw)


@pytest.mark.parametrize("guard", [{}, OFF])
def test_a_call_whole(fake, guard):
    choice = chat(fake, "harmony_tool", tools=[WEATHER], **guard).choices[0]
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    assert choice.message.reasoning_content == "Need the weather."
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    assert fake.last.prompt.endswith("<|start|>assistant")


@pytest.mark.parametrize("guard", [{}, OFF])
def test_a_call_streamed(fake, guard):
    deltas = [c.choices[0].delta for c in chat(fake, "harmony_tool", tools=[WEATHER], stream=True, **guard) if c.choices]
    assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == "Need the weather."
    assert not "".join(d.content or "" for d in deltas)
    calls = [tc for d in deltas for tc in d.tool_calls or []]
    assert calls[0].index == 0 and calls[0].id and calls[0].function.name == "get_weather"
    assert all(c.id is None and c.index == 0 for c in calls[1:])
    assert json.loads("".join(c.function.arguments or "" for c in calls)) == {"city": "Paris"}


def test_channels_without_tools_whole_and_streamed(fake):
    msg = chat(fake, "harmony_final").choices[0].message
    assert (msg.reasoning_content, msg.content) == ("The user wants a greeting.", "Hi!")
    deltas = [c.choices[0].delta for c in chat(fake, "harmony_final", stream=True) if c.choices]
    content = [d.content for d in deltas if d.content]
    assert "".join(content) == "Hi!" and not any(m in c for c in content for m in MARKERS)
    assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == "The user wants a greeting."


def test_the_recipient_before_the_channel(fake):
    (call,) = chat(fake, "harmony_role_call", tools=[WEATHER], **OFF).choices[0].message.tool_calls
    assert json.loads(call.function.arguments) == {"city": "Rome"}


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_thinking_and_tool_use(fake, stream):
    kw = {"model": "fake-model", "max_tokens": 64, "tools": [A_WEATHER],
          "messages": [{"role": "user", "content": "script:harmony_tool"}]}
    if stream:
        with fake.anthropic.messages.stream(**kw) as s:
            m = s.get_final_message()
    else:
        m = fake.anthropic.messages.create(**kw)
    assert [b.type for b in m.content] == ["thinking", "tool_use"] and m.content[0].thinking == "Need the weather."
    assert m.content[1].input == {"city": "Paris"} and m.stop_reason == "tool_use"


def test_history_with_reasoning_and_two_calls_goes_back_one_call_a_message(fake):
    """The template writes a message's first call only and names a result after the last call: each
    call goes in its own message, followed by its result (matched by id); its reasoning as `thinking`."""
    history = [{"role": "user", "content": "Paris and Rome?"},
               {"role": "assistant", "content": None, "reasoning_content": "Two cities.", "tool_calls": [
                   {"id": "call_p", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                   {"id": "call_r", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]},
               {"role": "tool", "tool_call_id": "call_r", "content": "rain"},
               {"role": "tool", "tool_call_id": "call_p", "content": "sun"},
               {"role": "user", "content": "script:harmony_final"}]
    fake.openai.chat.completions.create(model="fake-model", messages=history, tools=[WEATHER])
    call = "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{}<|call|>"
    result = '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"{}"<|end|>'
    expected = ("<|start|>assistant<|channel|>analysis<|message|>Two cities.<|end|>"
                + call.format('{"city": "Paris"}') + result.format("sun")
                + call.format('{"city": "Rome"}') + result.format("rain"))
    assert expected in fake.last.prompt


def test_a_forced_call_is_the_harmony_grammar(fake):
    chat(fake, "harmony_tool", tools=[WEATHER], tool_choice="required")
    grammar = fake.last.params.structured_output.grammar
    assert '"<|channel|>commentary to=functions." call' in grammar and '"get_weather"' in grammar


def test_ollama_thinking_and_content(fake):
    r = fake.client.post("/api/chat", json={"model": "fake-model", "stream": False,
                                            "messages": [{"role": "user", "content": "script:harmony_final"}]})
    message = r.json()["message"]
    assert (message["thinking"], message["content"]) == ("The user wants a greeting.", "Hi!")
    show = fake.client.post("/api/show", json={"model": "fake-model"}).json()
    assert "thinking" in show["capabilities"]


def test_the_guard_sends_the_lazy_call_grammar(fake):
    chat(fake, "harmony_tool", tools=[WEATHER])
    grammar = fake.last.params.structured_output.grammar
    assert "[lazy]" in grammar and "commentary to=functions" in grammar and '"get_weather" " <|constrain|>json' in grammar


def test_responses_reasoning_and_call_round_trip(fake):
    """/v1/responses: a reasoning item and a function_call item out; sent back with the call's output, the
    template gets the call (its recipient), the reasoning as the analysis before it, and the result."""
    tool = {"type": "function", **WEATHER["function"]}
    r = fake.openai.responses.create(model="fake-model", input="script:harmony_tool", tools=[tool])
    reasoning, call = r.output
    assert reasoning.type == "reasoning" and reasoning.content[0].text == "Need the weather."
    assert call.type == "function_call" and json.loads(call.arguments) == {"city": "Paris"}
    follow = ["script:harmony_final", *[o.model_dump() for o in r.output],
              {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}]
    follow[0] = {"role": "user", "content": follow[0]}
    fake.openai.responses.create(model="fake-model", input=follow, tools=[tool])
    assert ("<|start|>assistant<|channel|>analysis<|message|>Need the weather.<|end|>"
            '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>'
            '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"sunny"<|end|>') in fake.last.prompt
