"""A tool call cut off by max_tokens, on the chat-completions route in every tool-guard mode,
streamed (n=2) or whole (hearth.tool_parsers.cut): as OpenAI answers, the call as written so far
with finish_reason "length"; never its markup as content, never arguments the model did not write.
The fake engine writes one piece of the `cut_call` script a token (tests/server/fakes.py)."""

from __future__ import annotations

import json

import pytest

TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"], "additionalProperties": False}}}
NAMED = {"type": "function", "function": {"name": "get_time"}}
ASIA = '{"tz": "Asia/To'
# max_tokens -> (content, calls) for a named choice, "required" and "auto"; None: as for the named one
EXPECTED = {
    1: (("", [("get_time", "")]), ("", []), ("<tool_", [])),  # only "<tool_": auto cannot know it is a call
    3: (("", [("get_time", "")]), ("", []), ("", [])),  # '... {"name": "get_': no name is invented
    4: (("", [("get_time", "")]), None, None),  # the name is whole, no arguments yet
    5: (("", [("get_time", "{")]), None, None),  # "{", not "{}"
    6: (("", [("get_time", '{\n   "')]), None, None),
    7: (("", [("get_time", ASIA)]), None, None),
    8: (("", [("get_time", '{"tz": "Asia/Tokyo"}')]), None, None),  # whole but for </tool_call>
}
CHOICES = {"named": NAMED, "required": "required", "auto": "auto"}


def _body(k: int, choice: str, mode: str, **kw) -> dict:
    return {"model": "fake-model", "messages": [{"role": "user", "content": "script:cut_call"}], "tools": [TIME],
            "tool_choice": CHOICES[choice], "max_tokens": k, "temperature": 0, "hearth": {"tool_guard": mode}, **kw}


def _expected(k: int, choice: str):
    row = EXPECTED[k]
    got = row[list(CHOICES).index(choice)]
    return got if got is not None else row[0]


@pytest.mark.parametrize("mode", ["off", "grammar", "guard"])
@pytest.mark.parametrize("choice", list(CHOICES))
@pytest.mark.parametrize("k", list(EXPECTED))
def test_a_cut_call_is_returned_as_written(fake, mode, choice, k):
    r = fake.client.post("/v1/chat/completions", json=_body(k, choice, mode))
    assert r.status_code == 200, r.text
    (c,) = r.json()["choices"]
    content, calls = _expected(k, choice)
    msg = c["message"]
    assert c["finish_reason"] == "length"
    assert [(t["function"]["name"], t["function"]["arguments"]) for t in msg.get("tool_calls") or []] == calls
    assert (msg["content"] or "") == content


@pytest.mark.parametrize("mode", ["off", "grammar", "guard"])
@pytest.mark.parametrize("choice", list(CHOICES))
@pytest.mark.parametrize("k", list(EXPECTED))
def test_a_cut_call_streams_as_it_is_returned_whole(fake, mode, choice, k):
    body = _body(k, choice, mode, stream=True, n=2)
    with fake.client.stream("POST", "/v1/chat/completions", json=body) as r:
        lines = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line) for line in lines[:-1]]
    content, calls = _expected(k, choice)
    for i in range(2):
        deltas = [ch for chunk in chunks for ch in chunk["choices"] if ch["index"] == i]
        text = "".join(d["delta"].get("content") or "" for d in deltas)
        got: dict[int, list[str]] = {}
        for d in deltas:
            for t in d["delta"].get("tool_calls") or []:
                name, args = got.setdefault(t["index"], ["", ""])
                got[t["index"]] = [name + (t["function"].get("name") or ""), args + t["function"].get("arguments", "")]
        assert text == content and [tuple(v) for v in got.values()] == calls
        assert [d["finish_reason"] for d in deltas if d["finish_reason"]] == ["length"]


def test_the_cut_arguments_are_reported_as_not_json(fake):
    """Without the guard, a call whose arguments are not JSON says so in the `hearth` field; the
    guard reports it as a validation error (not retried: a retry would be cut again)."""
    off = fake.client.post("/v1/chat/completions", json=_body(7, "named", "off")).json()
    assert [e["kind"] for e in off["hearth"]["events"]] == ["unparsed_call"]
    guard = fake.client.post("/v1/chat/completions", json=_body(7, "named", "guard")).json()["hearth"]
    assert not guard["retries"] and "max_tokens" in guard["validation_errors"][0]


WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.mark.parametrize("mode", ["off", "guard"])
def test_a_cut_call_in_prose_is_not_rescued_into_a_clean_one(fake, mode):
    """The guard's rescue of unmarked calls would close `{"city": "Pa` into {"city": "Pa"}: it stays text."""
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "script:prose_cut"}], "tools": [WEATHER],
            "max_tokens": 2, "hearth": {"tool_guard": mode}}
    r = fake.client.post("/v1/chat/completions", json=body).json()
    (c,) = r["choices"]
    assert c["finish_reason"] == "length" and not c["message"].get("tool_calls")
    assert c["message"]["content"] == 'I will look it up: {"name": "get_weather", "arguments": {"city": "Pa'
    assert "rescued" not in [e["kind"] for e in r.get("hearth", {}).get("events", [])]


@pytest.mark.parametrize("stream", [False, True])
def test_a_cut_call_is_an_incomplete_item_of_the_responses_api(fake, stream):
    """/v1/responses: the response is incomplete, and so is the cut function_call item (not "completed")."""
    tool = {"type": "function", "name": "get_time", "parameters": TIME["function"]["parameters"]}
    body = {"model": "fake-model", "max_output_tokens": 7, "tools": [tool], "input": "script:cut_call",
            "tool_choice": {"type": "function", "name": "get_time"}, "stream": stream}
    if stream:
        with fake.client.stream("POST", "/v1/responses", json=body) as r:
            events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
        done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
        j = events[-1]["response"]
        assert [i["status"] for i in done] == ["incomplete"]
    else:
        j = fake.client.post("/v1/responses", json=body).json()
    assert j["status"] == "incomplete" and j["incomplete_details"] == {"reason": "max_output_tokens"}
    assert [(i["type"], i["arguments"], i["status"]) for i in j["output"]] == [("function_call", ASIA, "incomplete")]


@pytest.mark.parametrize("mode", ["off", "guard"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_cut_xml_call_is_not_a_clean_one(fake, mode, stream):
    """`<parameter=city>\nPa` cut: the call as written ({"city": "Pa), not qwen_xml's clean {"city": "Pa"}."""
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "script:xml_cut"}], "tools": [WEATHER],
            "max_tokens": 1, "hearth": {"tool_guard": mode}, "stream": stream}
    if stream:
        with fake.client.stream("POST", "/v1/chat/completions", json=body) as r:
            deltas = [json.loads(line[6:])["choices"][0] for line in r.iter_lines()
                      if line.startswith("data: ") and line != "data: [DONE]"]
        calls = [t for d in deltas for t in d["delta"].get("tool_calls") or []]
        arguments = "".join(t["function"].get("arguments", "") for t in calls)
        finish = [d["finish_reason"] for d in deltas if d["finish_reason"]]
    else:
        r = fake.client.post("/v1/chat/completions", json=body).json()
        (c,) = r["choices"]
        (call,) = c["message"]["tool_calls"]
        arguments, finish = call["function"]["arguments"], [c["finish_reason"]]
        hearth = r["hearth"]
        if mode == "off":
            assert [e["kind"] for e in hearth["events"]] == ["unparsed_call"]
        else:
            assert hearth["outcome"] == "unresolved" and "max_tokens" in hearth["validation_errors"][0]
    assert arguments == '{"city": "Pa' and finish == ["length"]
