"""A tool message whose tool_call_id answers no earlier call passes, as vLLM takes it (a 400 for it
broke vLLM's clients: hearth follows vLLM, not OpenAI's pairing rule), on the server and the library.
Anthropic's /v1/messages refuses a tool_result that answers no tool_use of the assistant turn before
it, as Anthropic's API does (its clients meet that 400 there already)."""

from __future__ import annotations

import pytest

from hearth.api.anthropic_messages import anthropic_messages
from hearth.api.messages import openai_messages

CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}
USER = {"role": "user", "content": "weather in Paris?"}
AGAIN = {"role": "user", "content": "script:hello"}


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/tokenize"])
@pytest.mark.parametrize("messages", [
    [USER, {"role": "tool", "tool_call_id": "zzz", "content": "sunny"}, AGAIN],
    [USER, CALL, {"role": "tool", "tool_call_id": "zzz", "content": "sunny"}, AGAIN],
    [USER, CALL, {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
     {"role": "tool", "tool_call_id": "call_2", "content": "rainy"}, AGAIN],
], ids=["no-call", "other-id", "one-too-many"])
def test_a_tool_message_answering_no_call_passes_as_vllm(fake, path, messages):
    r = fake.client.post(path, json={"messages": messages, "max_tokens": 2})
    assert r.status_code == 200, r.text


def test_a_tool_message_answering_an_earlier_call_passes(fake):
    messages = [USER, CALL, {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}, AGAIN]
    r = fake.client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 2})
    assert r.status_code == 200, r.text
    legacy = [USER, {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
              {"role": "function", "name": "f", "content": "done"}, AGAIN]
    r = fake.client.post("/v1/chat/completions", json={"messages": legacy, "max_tokens": 2})
    assert r.status_code == 200, r.text


def test_the_library_path_stays_lenient():
    out = openai_messages([USER, {"role": "tool", "tool_call_id": "zzz", "content": "sunny"}], wire=False)
    assert out[1]["role"] == "tool" and out[1]["tool_call_id"] == "zzz"


A_CALL = {"role": "assistant", "content": [{"type": "text", "text": "checking"},
                                          {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}},
                                          {"type": "tool_use", "id": "t2", "name": "get_weather", "input": {}}]}


def _result(use_id: str) -> dict:
    return {"type": "tool_result", "tool_use_id": use_id, "content": "sunny"}


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
@pytest.mark.parametrize("messages,at,use_id", [
    ([{"role": "user", "content": [_result("t1")]}], "messages[0].content[0]", "t1"),  # no call before it
    ([USER, A_CALL, {"role": "user", "content": [_result("t1"), _result("t9")]}], "messages[2].content[1]", "t9"),
    # a call of an earlier assistant turn is answered already: only the turn just before counts
    ([USER, A_CALL, {"role": "user", "content": [_result("t1"), _result("t2")]},
      {"role": "assistant", "content": "done"}, {"role": "user", "content": [_result("t1")]}],
     "messages[4].content[0]", "t1"),
    ([USER, A_CALL, {"role": "user", "content": [_result("t1")]},
      {"role": "assistant", "content": [{"type": "tool_use", "id": "t3", "name": "f", "input": {}}]},
      {"role": "user", "content": [{"type": "text", "text": "and"}, _result("t2")]}], "messages[4].content[1]", "t2"),
], ids=["no-call", "unknown-id", "earlier-turn", "earlier-call"])
def test_anthropic_refuses_a_tool_result_answering_no_call_of_the_turn_before(fake, path, messages, at, use_id):
    r = fake.client.post(path, json={"messages": messages, "max_tokens": 2})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert r.json()["type"] == "error" and error["type"] == "invalid_request_error"
    assert error["message"] == (f"{at}.tool_use_id: unexpected `tool_use_id` found in `tool_result` blocks: {use_id}. "
                                "Each `tool_result` block must have a corresponding `tool_use` block in the previous "
                                "message.")


def test_anthropic_takes_results_of_the_turn_before():
    """Parallel calls' results in one turn, in any order, or split over consecutive user turns (one
    turn to Anthropic), and a call left unanswered, pass."""
    for after in ([{"role": "user", "content": [_result("t2"), _result("t1")]}],
                  [{"role": "user", "content": [_result("t1")]}, {"role": "user", "content": [_result("t2")]}],
                  [{"role": "user", "content": [_result("t2")]}]):
        out = anthropic_messages([USER, A_CALL, *after])
        assert [m["tool_call_id"] for m in out if m["role"] == "tool"] == \
               [b["tool_use_id"] for m in after for b in m["content"]]


def test_anthropic_takes_results_of_an_assistant_turn_split_over_messages():
    """Consecutive assistant messages are one turn too (clients that write one message per tool call, or
    text and calls apart): a result may answer a call of any of them."""
    def call(use_id):
        return {"role": "assistant", "content": [{"type": "tool_use", "id": use_id, "name": "f", "input": {}}]}
    for turn in ([call("t1"), call("t2")], [call("t1"), {"role": "assistant", "content": "more text"}, call("t2")]):
        out = anthropic_messages([USER, *turn, {"role": "user", "content": [_result("t1"), _result("t2")]}])
        assert [m["tool_call_id"] for m in out if m["role"] == "tool"] == ["t1", "t2"]


def test_anthropic_answered_call_through_the_server(fake):
    messages = [USER, A_CALL, {"role": "user", "content": [_result("t1"), _result("t2")]}]
    r = fake.client.post("/v1/messages", json={"messages": messages, "max_tokens": 2})
    assert r.status_code == 200, r.text
