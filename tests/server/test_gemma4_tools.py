"""A Gemma 4 chat template served on the scripted engine (tests/server/fakes.py): its thought channel
as reasoning, its `<|tool_call>call:NAME{...}<tool_call|>` calls as tool calls, through the OpenAI,
Anthropic and Ollama APIs, whole and streamed; forced and lazy call grammars of its own syntax. The
scripts split the markers mid-way, as deltas may."""

from __future__ import annotations

import json

import pytest

from tests.server.fakes import SCRIPTS
from tests.tool_parsers.templates import GEMMA4

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "weather in a city",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string"}, "days": {"type": "integer"}},
                                                "required": ["city"]}}}
A_WEATHER = {"name": "get_weather", "description": "weather in a city", "input_schema": WEATHER["function"]["parameters"]}
MARKERS = ("<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", '<|"|>')
GEMMA_SCRIPTS = {
    "gemma_tool": ["<|chan", "nel>thought\nNeed the ", "weather.<chan", "nel|><|tool_", "call>call:get_weather{ci",
                   'ty:<|"|>Paris, F', 'R<|"', '|>,days:2}<tool_call|>'],
    "gemma_final": ["<|channel>thought\n", "A greeting.", "<channel|>", "Hi", "!"],
}
OFF = {"extra_body": {"hearth": {"tool_guard": "off"}}}
PARIS = {"city": "Paris, FR", "days": 2}


@pytest.fixture
def fake(make_fake, monkeypatch):
    for name, pieces in GEMMA_SCRIPTS.items():
        monkeypatch.setitem(SCRIPTS, name, pieces)
    return make_fake(GEMMA4)


def chat(fake, script: str, **kw):
    return fake.openai.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": f"script:{script}"}],
                                               **kw)


@pytest.mark.parametrize("guard", [{}, OFF])
def test_a_call_whole(fake, guard):
    choice = chat(fake, "gemma_tool", tools=[WEATHER], **guard).choices[0]
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    assert choice.message.reasoning_content == "Need the weather."
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == PARIS


@pytest.mark.parametrize("guard", [{}, OFF])
def test_a_call_streamed(fake, guard):
    deltas = [c.choices[0].delta for c in chat(fake, "gemma_tool", tools=[WEATHER], stream=True, **guard) if c.choices]
    assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == "Need the weather."
    assert not "".join(d.content or "" for d in deltas)
    calls = [tc for d in deltas for tc in d.tool_calls or []]
    assert calls[0].index == 0 and calls[0].id and calls[0].function.name == "get_weather"
    assert json.loads("".join(c.function.arguments or "" for c in calls)) == PARIS


def test_thought_and_content_without_tools(fake):
    msg = chat(fake, "gemma_final").choices[0].message
    assert (msg.reasoning_content, msg.content) == ("A greeting.", "Hi!")
    deltas = [c.choices[0].delta for c in chat(fake, "gemma_final", stream=True) if c.choices]
    content = [d.content for d in deltas if d.content]
    assert "".join(content) == "Hi!" and not any(m in c for c in content for m in MARKERS)
    assert fake.last.prompt.endswith("<|turn>model\n<|channel>thought\n<channel|>")  # thinking off: closed empty


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_thinking_and_tool_use(fake, stream):
    kw = {"model": "fake-model", "max_tokens": 64, "tools": [A_WEATHER],
          "messages": [{"role": "user", "content": "script:gemma_tool"}]}
    if stream:
        with fake.anthropic.messages.stream(**kw) as s:
            m = s.get_final_message()
    else:
        m = fake.anthropic.messages.create(**kw)
    assert [b.type for b in m.content] == ["thinking", "tool_use"] and m.content[0].thinking == "Need the weather."
    assert m.content[1].input == PARIS and m.stop_reason == "tool_use"


def test_ollama_thinking_and_tool_calls(fake):
    r = fake.client.post("/api/chat", json={"model": "fake-model", "stream": False, "tools": [WEATHER],
                                            "messages": [{"role": "user", "content": "script:gemma_tool"}]})
    message = r.json()["message"]
    assert message["thinking"] == "Need the weather." and not message["content"]
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]] == [("get_weather", PARIS)]


def test_a_forced_call_and_the_guard_use_gemma_s_syntax(fake):
    chat(fake, "gemma_tool", tools=[WEATHER], tool_choice="required")
    forced = fake.last.params.structured_output.grammar
    assert '"<|tool_call>call:" call "<tool_call|>"' in forced and '"city:" gstr' in forced
    chat(fake, "gemma_tool", tools=[WEATHER])
    lazy = fake.last.params.structured_output.grammar
    assert "[lazy]" in lazy and "gemma_call" in lazy and '"days:" G_INT' in lazy


def test_an_older_template_gets_the_results_in_its_tool_responses(make_fake):
    """The first Gemma 4 GGUFs' template knows no `role: tool` message: the results go into the calling turn's
    tool_responses (JSON parsed, named by the call in their place), its answer after them in the same turn."""
    from tests.tool_parsers.templates import GEMMA4_OLD

    fake = make_fake(GEMMA4_OLD)
    call = {"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    history = [{"role": "user", "content": "Paris and Rome?"},
               {"role": "assistant", "content": None, "tool_calls": [{**call, "id": "p"}, {**call, "id": "r"}]},
               {"role": "tool", "tool_call_id": "p", "content": '{"temp": 20}'},
               {"role": "tool", "tool_call_id": "r", "content": "rain"},
               {"role": "assistant", "content": "Warm in Paris, rain in Rome."},
               {"role": "user", "content": "script:gemma_final"}]
    fake.openai.chat.completions.create(model="fake-model", messages=history, tools=[WEATHER])
    turn = ("<|turn>model\n" + "<|tool_call>call:get_weather{}<tool_call|>" * 2
            + "<|tool_response>response:get_weather{temp:20}<tool_response|>"
            + "<|tool_response>response:get_weather{value:rain}<tool_response|>Warm in Paris, rain in Rome.<turn|>")
    assert turn in fake.last.prompt and "<|turn>tool" not in fake.last.prompt
