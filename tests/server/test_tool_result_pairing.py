"""OpenAI's pairing rule on the server's OpenAI routes: a tool message answers a call an earlier
assistant message made; one that answers none is a 400 naming its tool_call_id. The library's
LLM.chat path stays lenient (Hugging Face's convention: hearth.api.messages openai_messages(wire=False))."""

from __future__ import annotations

import pytest

from hearth.api.messages import openai_messages

CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}
USER = {"role": "user", "content": "weather in Paris?"}


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/tokenize"])
@pytest.mark.parametrize("messages,at", [
    ([USER, {"role": "tool", "tool_call_id": "zzz", "content": "sunny"}], 1),
    ([USER, CALL, {"role": "tool", "tool_call_id": "zzz", "content": "sunny"}], 2),
    ([USER, CALL, {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
      {"role": "tool", "tool_call_id": "call_2", "content": "rainy"}], 3),
])
def test_a_tool_message_answering_no_call_is_a_400(fake, path, messages, at):
    r = fake.client.post(path, json={"messages": messages, "max_tokens": 2})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == f"messages[{at}].tool_call_id"
    assert error["message"].startswith(f"messages[{at}].tool_call_id: '{messages[at]['tool_call_id']}' is the id of "
                                       "no tool call an earlier assistant message made"), error


def test_a_tool_message_answering_an_earlier_call_passes(fake):
    messages = [USER, CALL, {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                {"role": "user", "content": "script:hello"}]
    r = fake.client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 2})
    assert r.status_code == 200, r.text
    legacy = [USER, {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
              {"role": "function", "name": "f", "content": "done"}, {"role": "user", "content": "script:hello"}]
    r = fake.client.post("/v1/chat/completions", json={"messages": legacy, "max_tokens": 2})
    assert r.status_code == 200, r.text


def test_the_library_path_stays_lenient():
    out = openai_messages([USER, {"role": "tool", "tool_call_id": "zzz", "content": "sunny"}], wire=False)
    assert out[1]["role"] == "tool" and out[1]["tool_call_id"] == "zzz"
