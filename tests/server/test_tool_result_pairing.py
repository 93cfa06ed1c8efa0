"""A tool message whose tool_call_id answers no earlier call passes, as vLLM takes it (a 400 for it
broke vLLM's clients: hearth follows vLLM, not OpenAI's pairing rule), on the server and the library."""

from __future__ import annotations

import pytest

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
