"""A list or an object where the API wants a string or a list of objects is a 400 naming the field: each was a 500 a
fuzz found (a role or a part's type looked up in a table is no key: "unhashable type: 'list'"; an Ollama tool call
that is no object was indexed by "id")."""

from __future__ import annotations

import pytest

USER = [{"role": "user", "content": "hi"}]
ASSISTANT_CALL = {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]}
# (route, body, the message's start)
CASES = [
    ("/v1/chat/completions", {"messages": [{"role": [], "content": "hi"}]},
     "messages[0].role: must be a string, not a list"),
    ("/apply-template", {"messages": [{"role": {"a": 1}, "content": "hi"}]},
     "messages[0].role: must be a string, not an object"),
    ("/api/chat", {"messages": [{"role": ["user"], "content": "hi"}], "stream": False},
     "messages[0].role: must be a string, not a list"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": ["text"], "text": "hi"}]}]},
     "messages[0].content[0].type"),
    ("/v1/responses", {"input": [{"role": [], "content": "hi"}]}, "input[0].role: unknown role []"),
    ("/v1/responses", {"input": [{"type": {}, "content": "hi"}]}, "input[0].type: unknown item type {}"),
    ("/api/chat", {"messages": [*USER, {**ASSISTANT_CALL, "tool_calls": 5}, {"role": "tool", "content": "ok"}],
                   "stream": False}, "messages[1].tool_calls: must be a list, not a number"),
    ("/api/chat", {"messages": [*USER, {**ASSISTANT_CALL, "tool_calls": ["x"]}, {"role": "tool", "content": "ok"}],
                   "stream": False}, "messages[1].tool_calls[0]: must be an object, not a string"),
]


def message_of(route, r) -> str:
    return r.json()["error"] if route.startswith("/api/") else r.json()["error"]["message"]


@pytest.mark.parametrize("route,body,words", CASES, ids=[w.split(":")[0] for _, _, w in CASES])
def test_a_wrong_shape_is_a_400_naming_it(fake, route, body, words):
    r = fake.client.post(route, json={"model": "fake-model", **body})
    assert r.status_code == 400, r.text
    assert message_of(route, r).startswith(words), r.text


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/api/chat"])
def test_a_tool_s_required_list_of_lists_is_no_500(fake, route):
    """declared_only made a set of `required` to close the schema: [[1]] is no set."""
    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "string"}}, "required": [["a"]]}}}
    r = fake.client.post(route, json={"model": "fake-model", "messages": USER, "tools": [tool], "stream": False})
    assert r.status_code < 500, r.text
