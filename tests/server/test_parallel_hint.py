"""The guard's system sentence for parallel calls (hearth.tool_guard.parallel_hint) through the routes,
on the scripted engine: added in mode guard only, where tools are offered, tool_choice is not "none",
parallel calls are allowed and the request did not switch it off; worded in the format's own
delimiters; appended to the client's system message, else the whole system message; reported in
`hearth.events`; and the same text in every render of a conversation (re-prompts, later turns,
/tokenize), so the cached prefix is reused. Each "absent" case is paired with the same request
without its condition, where the sentence is present. Off by default (`hearth serve
--tool-guard-parallel-hint`, or per request): these servers have it on unless a test says otherwise."""

from __future__ import annotations

import argparse
import json

import pytest

from hearth.commands.serve import tool_guard
from hearth.tool_guard import GuardConfig
from hearth.tool_guard.parallel_hint import parallel_hint, with_system_text
from tests.server.fakes import TEMPLATE, FakeEngine

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
A_WEATHER = {"name": "get_weather", "description": "weather in a city",
             "input_schema": WEATHER["function"]["parameters"]}
R_WEATHER = {"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}
HINT = ("When the request asks for several things, answer with one function call for each of them, "
        "every call in its own <tool_call></tool_call> tags.")
EVENT = {"kind": "prompt_instruction", "name": "parallel_calls", "where": "system", "text": HINT}
USER = [{"role": "user", "content": "Weather in Paris and in Rome?"}]
# Qwen2.5's shape: a default system text where the conversation has none
DEFAULT = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
QWEN_LIKE = TEMPLATE.replace("{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}",
                             "{% if messages[0].role == 'system' %}{{ messages[0].content }}{% else %}" + DEFAULT
                             + "{% endif %}\n\n")


ON = GuardConfig(parallel_hint=True)


@pytest.fixture
def fake(make_fake):
    return make_fake(tool_guard=ON)


def chat(fake, messages=USER, **body):
    return fake.client.post("/v1/chat/completions", json={"messages": messages, **body})


def events(body: dict) -> list[dict]:
    return (body.get("hearth") or {}).get("events", [])


def test_the_sentence_names_the_formats_own_delimiters():
    assert parallel_hint("hermes") == HINT and parallel_hint("qwen_xml") == HINT
    # no closing marker per call (a JSON list after [TOOL_CALLS], a bare object): no sentence
    assert [parallel_hint(f) for f in ("mistral", "llama3_json", "bare_json", None, "no_such")] == [None] * 5


def test_added_to_the_system_message_and_reported(fake):
    body = chat(fake, tools=[WEATHER]).json()
    prompt = fake.last.prompt
    assert prompt.startswith(f"<|im_start|>system\n{HINT}\n\n# Tools") and prompt.count(HINT) == 1
    assert EVENT in events(body)
    chat(fake, [{"role": "system", "content": "Be brief."}, *USER], tools=[WEATHER])
    assert fake.last.prompt.startswith(f"<|im_start|>system\nBe brief.\n\n{HINT}\n\n# Tools")


@pytest.mark.parametrize("condition", [
    {"hearth": {"tool_guard": "off"}},
    {"hearth": {"tool_guard": "grammar"}},
    {"hearth": {"tool_guard_parallel_hint": False}},
    {"tool_choice": "none"},
    {"parallel_tool_calls": False},
    {"tools": None},
], ids=["off", "grammar", "switched-off", "tool_choice-none", "parallel_tool_calls-false", "no-tools"])
def test_absent_under_each_condition(fake, condition):
    with_it = chat(fake, tools=[WEATHER]).json()
    assert HINT in fake.last.prompt and EVENT in events(with_it)
    body = chat(fake, **{"tools": [WEATHER], **condition})
    assert body.status_code == 200, body.text
    assert HINT not in fake.last.prompt and EVENT not in events(body.json())


def test_off_unless_the_server_or_the_request_turns_it_on(make_fake):
    plain = make_fake()
    body = chat(plain, tools=[WEATHER]).json()
    assert HINT not in plain.last.prompt and EVENT not in events(body)
    body = chat(plain, tools=[WEATHER], hearth={"tool_guard_parallel_hint": True}).json()
    assert HINT in plain.last.prompt and EVENT in events(body)
    flags = argparse.Namespace(tool_guard="guard", tool_guard_retries=3, tool_guard_parallel_hint=True)
    assert tool_guard(flags) == ON and not tool_guard(argparse.Namespace()).parallel_hint


def test_the_switch_must_be_a_boolean(fake):
    r = chat(fake, tools=[WEATHER], hearth={"tool_guard_parallel_hint": "no"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "hearth.tool_guard_parallel_hint"
    assert "true or false" in r.json()["error"]["message"]
    assert chat(fake, tools=[WEATHER], hearth={"tool_guard_parallel_hint": True}).status_code == 200


def test_where_the_client_gave_no_system_message_the_sentence_is_the_whole_of_it(make_fake):
    """It takes the place of the template's default system text (Qwen's "You are Qwen, ..."): kept
    beside it, the sentence did nothing measurable (hearth.tool_guard.parallel_hint.with_system_text)."""
    fake = make_fake(QWEN_LIKE, tool_guard=ON)
    chat(fake, tools=[WEATHER], hearth={"tool_guard_parallel_hint": False})
    assert DEFAULT in fake.last.prompt
    chat(fake, tools=[WEATHER])
    assert fake.last.prompt.startswith(f"<|im_start|>system\n{HINT}\n# Tools") and DEFAULT not in fake.last.prompt
    chat(fake, [{"role": "system", "content": "Be brief."}, *USER], tools=[WEATHER])
    assert fake.last.prompt.startswith(f"<|im_start|>system\nBe brief.\n\n{HINT}\n# Tools")


def test_the_same_prefix_across_turns_and_retries(make_fake):
    """A later turn's prompt extends the earlier one's (the cached prefix is reused), and a re-prompt
    carries the same system message."""
    fake = make_fake(QWEN_LIKE, tool_guard=ON)
    chat(fake, tools=[WEATHER])
    first = fake.last.prompt
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    turn2 = [*USER, {"role": "assistant", "content": None, "tool_calls": [call]},
             {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    chat(fake, turn2, tools=[WEATHER])
    generation = "<|im_start|>assistant\n"
    assert first.endswith(generation) and fake.last.prompt.startswith(first[:-len(generation)])
    assert HINT in first
    retried = make_fake(QWEN_LIKE, engine=FakeEngine(), tool_guard=ON)
    body = chat(retried, [{"role": "user", "content": "script:guard_never"}], tools=[WEATHER],
                hearth={"tool_guard_retries": 2}).json()
    assert [r["kind"] for r in body["hearth"]["retries"]] == ["resample", "reprompt"]
    system = first[:first.index("<|im_start|>user")]
    assert all(a.prompt.startswith(system) for a in retried.engine.added)
    assert events(body).count(EVENT) == 1  # once a request, however many renders


def test_tokenize_renders_what_the_chat_renders(fake):
    """/tokenize (and /slots/save) render as a chat request with the same fields: the saved prefix is the chat's."""
    ids = fake.client.post("/tokenize", json={"messages": USER, "tools": [WEATHER]}).json()["tokens"]
    chat(fake, tools=[WEATHER])
    assert "".join(map(chr, ids)) == fake.last.prompt and HINT in fake.last.prompt


def test_anthropic_and_responses(fake):
    a_body = {"max_tokens": 64, "messages": USER, "tools": [A_WEATHER]}
    body = fake.client.post("/v1/messages", json=a_body).json()
    assert HINT in fake.last.prompt and EVENT in events(body)
    off = {**a_body, "tool_choice": {"type": "auto", "disable_parallel_tool_use": True}}
    body = fake.client.post("/v1/messages", json=off).json()
    assert HINT not in fake.last.prompt and EVENT not in events(body)
    body = fake.client.post("/v1/responses", json={"input": "Weather?", "tools": [R_WEATHER],
                                                   "instructions": "Be brief."}).json()
    assert fake.last.prompt.startswith(f"<|im_start|>system\nBe brief.\n\n{HINT}") and EVENT in events(body)
    body = fake.client.post("/v1/responses", json={"input": "Weather?", "tools": [R_WEATHER],
                                                   "parallel_tool_calls": False}).json()
    assert HINT not in fake.last.prompt and EVENT not in events(body)


def test_with_system_text_leaves_the_callers_messages_alone():
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "u"}]
    out = with_system_text(msgs, "T")
    assert out[0]["content"] == "S\n\nT" and msgs[0]["content"] == "S" and out[1] is msgs[1]
    assert with_system_text(msgs[1:], "T")[0] == {"role": "system", "content": "T"}
    assert json.dumps(with_system_text([], "T")) == '[{"role": "system", "content": "T"}]'
