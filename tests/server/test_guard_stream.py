"""Guarded calls on the wire (issue 21.6 with issue 20.3), against a scripted engine
(tests/server/fakes.py): a call the grammar holds streams as it is written (id and name first, then
its arguments in pieces) in all three APIs, the pieces joined equal to the whole response's call;
a call the grammar does not hold (rescued from prose, a schema keyword the grammar cannot hold, an
answer that opens with a call and may go on, stop strings) is held and sent once validated; a
retry never shows the client the call it replaced, and the guard never retries past a streamed call."""

from __future__ import annotations

import json

import pytest

from tests.server.test_tool_guard import LOOSE, WEATHER


def _body(script: str, **kw) -> dict:
    return {"model": "fake-model", "messages": [{"role": "user", "content": f"script:{script}"}],
            "tools": [WEATHER], **kw}


def whole(fake, script: str, **kw) -> dict:
    r = fake.client.post("/v1/chat/completions", json=_body(script, **kw))
    assert r.status_code == 200, r.text
    return r.json()


def sse(fake, path: str, body: dict) -> list[dict]:
    with fake.client.stream("POST", path, json={**body, "stream": True}) as r:
        assert r.status_code == 200
        lines = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    return [json.loads(line) for line in lines if line != "[DONE]"]


def chunks(fake, script: str, **kw) -> tuple[list[dict], dict]:
    """(each chunk's delta in order, the finish chunk)."""
    out = sse(fake, "/v1/chat/completions", _body(script, **kw))
    finish = next(c for c in out if c["choices"] and c["choices"][0]["finish_reason"])
    return [c["choices"][0]["delta"] for c in out if c["choices"]], finish


def call_deltas(deltas: list[dict]) -> list[dict]:
    return [tc for d in deltas for tc in d.get("tool_calls") or []]


def test_a_held_call_streams_id_and_name_then_its_arguments_in_pieces(fake):
    plain = whole(fake, "guard_stream")
    (call,) = plain["choices"][0]["message"]["tool_calls"]
    assert plain["hearth"]["outcome"] == "ok" and plain["hearth"]["retries"] == []
    deltas, finish = chunks(fake, "guard_stream")
    pieces = call_deltas(deltas)
    first = pieces[0]
    assert first["id"].startswith("call_") and first["function"] == {"name": "get_weather", "arguments": ""}
    assert len(pieces) >= 4 and all("id" not in p and "name" not in p["function"] for p in pieces[1:])
    joined = "".join(p["function"]["arguments"] for p in pieces)
    assert joined == call["function"]["arguments"] and json.loads(joined) == {"city": "Paris", "days": 3}
    # the same call as the guard reports it (one id from the first delta to the end)
    assert [(c["id"], c["name"]) for c in finish["hearth"]["calls"]] == [(first["id"], "get_weather")]
    assert finish["choices"][0]["finish_reason"] == "tool_calls" and finish["hearth"]["outcome"] == "ok"


def test_text_before_a_call_streams_as_it_comes(fake):
    deltas, _ = chunks(fake, "guard_stream")
    texts = [d["content"] for d in deltas if d.get("content")]
    # a chunk per piece the engine wrote (trailing space held back until text follows it)
    assert texts == ["Let me", " check."]
    first_call = next(i for i, d in enumerate(deltas) if d.get("tool_calls"))
    assert all(i < first_call for i, d in enumerate(deltas) if d.get("content"))


def test_anthropic_streams_input_json_deltas(fake):
    tool = {"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}
    body = {"model": "fake-model", "max_tokens": 64, "tools": [tool],
            "messages": [{"role": "user", "content": "script:guard_stream"}]}
    r = fake.client.post("/v1/messages", json=body)
    assert r.status_code == 200, r.text
    use = r.json()["content"][-1]
    events = sse(fake, "/v1/messages", body)
    start = next(e for e in events if e["type"] == "content_block_start" and e["content_block"]["type"] == "tool_use")
    block = start["content_block"]
    assert block["name"] == "get_weather" and block["id"].startswith("toolu_") and block["input"] == {}
    parts = [e["delta"]["partial_json"] for e in events
             if e["type"] == "content_block_delta" and e["delta"]["type"] == "input_json_delta"]
    assert len(parts) >= 3 and json.loads("".join(parts)) == use["input"] == {"city": "Paris", "days": 3}
    ids = [c["id"] for c in next(e for e in events if e["type"] == "message_delta")["hearth"]["calls"]]
    assert block["id"] == "toolu_" + ids[0].removeprefix("call_")  # the id the guard reports, Anthropic's way


def test_responses_stream_function_call_argument_deltas(fake):
    body = {"model": "fake-model", "input": "script:guard_stream", "tools": [
        {"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}]}
    r = fake.client.post("/v1/responses", json=body)
    assert r.status_code == 200, r.text
    item = next(i for i in r.json()["output"] if i["type"] == "function_call")
    events = sse(fake, "/v1/responses", body)
    added = next(e for e in events if e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call")
    assert added["item"]["name"] == "get_weather" and added["item"]["call_id"].startswith("call_")
    deltas = [e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"]
    done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    assert len(deltas) >= 3 and "".join(deltas) == done["arguments"] == item["arguments"]
    texts = [e for e in events if e["type"] == "response.output_text.delta"]
    assert events.index(texts[-1]) < events.index(added)  # the text streamed before the call began


def _sent_once_validated(deltas: list[dict]) -> dict:
    """The one call delta of a held call: id, name and all its arguments together, after every text."""
    (call,) = call_deltas(deltas)
    at = next(i for i, d in enumerate(deltas) if d.get("tool_calls"))
    assert call["id"] and call["function"]["name"] == "get_weather"
    assert not [d for d in deltas[at + 1:] if d.get("content")]
    return call


def test_a_call_rescued_from_prose_is_held_until_validated(fake):
    deltas, finish = chunks(fake, "guard_prose")
    call = _sent_once_validated(deltas)
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert [d["content"] for d in deltas if d.get("content")][0] == "I will look it up:"  # text as it came
    assert finish["hearth"]["events"][0]["kind"] == "rescued"


def test_a_schema_the_grammar_does_not_hold_is_held_until_validated(fake):
    deltas, finish = chunks(fake, "guard_stream", tools=[LOOSE])
    call = _sent_once_validated(deltas)
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris", "days": 3}
    assert [d["content"] for d in deltas if d.get("content")] == ["Let me", " check."]


@pytest.mark.parametrize("script,kw", [("guard_stream", {"stop": ["}"]}), ("guard_fence", {}),
                                       ("guard_stream", {"response_format": {"type": "json_object"}})],
                         ids=["stop_strings", "answer_may_go_on", "no_call_grammar"])
def test_calls_the_grammar_may_not_hold_are_held(fake, script, kw):
    """A stop string can cut a call the grammar was writing; an answer opened by a fenced call may go
    on with more calls in free text (parallel_tool_calls true); with response_format no call grammar
    runs at all."""
    _sent_once_validated(chunks(fake, script, **kw)[0])


def test_an_opening_call_streams_when_the_grammar_ends_the_answer_after_it(fake):
    pieces = call_deltas(chunks(fake, "guard_fence", parallel_tool_calls=False)[0])
    assert pieces[0]["function"] == {"name": "get_weather", "arguments": ""} and len(pieces) >= 3
    assert json.loads("".join(p["function"]["arguments"] for p in pieces)) == {"city": "Paris"}


def test_a_retry_never_leaks_the_held_bad_call(fake):
    deltas, finish = chunks(fake, "guard_bad_args", tools=[LOOSE])
    wire = json.dumps(deltas)
    assert "town" not in wire and '"city\\": 7' not in wire  # neither failed attempt went out
    call = _sent_once_validated(deltas)
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert [r["kind"] for r in finish["hearth"]["retries"]] == ["resample", "reprompt"]


def test_a_resample_keeps_the_streamed_call_and_streams_its_own(fake):
    """A held call streams; the next one names no tool (held), and the resample that replaces it
    keeps the first and streams the second after it."""
    plain = whole(fake, "guard_second_bad")
    fake.engine.attempts.clear()
    deltas, finish = chunks(fake, "guard_second_bad")
    pieces = call_deltas(deltas)
    assert "get_wether" not in json.dumps(deltas)
    starts = [p for p in pieces if p.get("id")]
    assert [(p["index"], p["function"]["name"]) for p in starts] == [(0, "get_weather"), (1, "get_weather")]
    joined = ["".join(p["function"]["arguments"] for p in pieces if p["index"] == i) for i in (0, 1)]
    assert joined == [c["function"]["arguments"] for c in plain["choices"][0]["message"]["tool_calls"]]
    assert [c["id"] for c in finish["hearth"]["calls"]] == [p["id"] for p in starts]
    assert [r["kind"] for r in finish["hearth"]["retries"]] == ["resample"]


def test_no_reprompt_takes_back_a_streamed_call(fake):
    """A streamed call, then a call of a tool whose schema the grammar does not hold, wrong twice:
    the resample keeps the first; a re-prompt would answer afresh without it, so none is made. A
    client that does not stream has been sent nothing: its answer is re-prompted as before."""
    add = {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "number"}}, "patternProperties": {"^x-": {}}}}}
    plain = whole(fake, "guard_later_bad", tools=[WEATHER, add])
    assert "reprompt" in [r["kind"] for r in plain["hearth"]["retries"]] and "retry_stopped" not in plain["hearth"]
    fake.engine.attempts.clear()
    deltas, finish = chunks(fake, "guard_later_bad", tools=[WEATHER, add])
    ext = finish["hearth"]
    assert [r["kind"] for r in ext["retries"]] == ["resample"] and ext["outcome"] == "unresolved"
    assert ext["retry_stopped"] == "1 call(s) already streamed to the client"
    pieces = call_deltas(deltas)
    assert pieces[0]["function"] == {"name": "get_weather", "arguments": ""} and pieces[0]["index"] == 0
    first = "".join(p["function"]["arguments"] for p in pieces if p["index"] == 0)
    assert first == '{"city": "Paris"}'
    # add's calls were held: only the last, once, at the end; its first failed call never went out
    assert [p["function"]["arguments"] for p in pieces if p["index"] == 1] == ['{"a": "y"}']
    assert not [d for d in deltas if '"x"' in (d.get("content") or "")]


def test_a_declined_call_never_streams(fake):
    deltas, finish = chunks(fake, "guard_forced_name")
    assert call_deltas(deltas) == []  # the model's own text instead, written again without the grammar
    assert "".join(d.get("content") or "" for d in deltas) == '```json\n{"name": "triangle_area", "arguments": {"base": 3}}\n```'
    assert finish["choices"][0]["finish_reason"] == "stop"


def test_the_guard_never_retries_past_a_streamed_call(fake):
    """Under a real grammar a held call cannot fail its schema; the fake writes one anyway
    ({"town": ...} where the schema closes its parameters). A streaming client has it: the guard
    keeps it as sent, reports the problem and stops. Without streaming it is retried as before."""
    plain = whole(fake, "guard_bad_args")
    assert plain["hearth"]["retries"] and "retry_stopped" not in plain["hearth"]
    fake.engine.attempts.clear()
    deltas, finish = chunks(fake, "guard_bad_args")
    pieces = call_deltas(deltas)
    assert pieces[0]["function"]["arguments"] == ""
    assert "".join(p["function"]["arguments"] for p in pieces) == '{"town": "Paris"}'
    assert finish["hearth"]["retries"] == [] and finish["hearth"]["outcome"] == "unresolved"
    assert finish["hearth"]["retry_stopped"] == "1 call(s) already streamed to the client"


def test_grammar_mode_streams_every_call(fake):
    """Mode grammar neither validates nor retries: a call is final as written, whatever its schema."""
    pieces = call_deltas(chunks(fake, "guard_stream", tools=[LOOSE], hearth={"tool_guard": "grammar"})[0])
    assert pieces[0]["function"]["arguments"] == "" and len(pieces) >= 4


def test_a_workflow_holds_every_call(fake):
    wf = {"workflow": {"required": ["get_weather"]}}
    _sent_once_validated(chunks(fake, "guard_stream", hearth=wf)[0])


def test_a_streamed_call_still_reports_the_name_probability_the_gate_read(fake):
    """A held call streams after the decline gate read its name: its report keeps the raw
    probability the gate read (calls[].name_prob, what --sweep tunes the gate's floor on)."""
    deltas, finish = chunks(fake, "guard_stream")
    assert len([p for p in call_deltas(deltas) if p["function"].get("arguments")]) > 1  # it streamed
    (call,) = finish["hearth"]["calls"]
    assert call["name_prob"] is not None and 0 < call["name_prob"] <= 1


# the first key streamed, then a number no double holds: the final parse fails after the call began
OVERFLOW_LATE = ['<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa', 'ris", "days": 1e400}}\n</tool_call>']
OVERFLOW_WHY = "get_weather: arguments are not JSON: the number 1e400 is out of a double's range"


def test_a_streamed_call_that_stops_parsing_is_never_a_clean_truncated_call(fake, monkeypatch):
    """`{"city": "Paris"` went out, then 1e400 came: the client's arguments end as the model wrote
    them (never the streamed prefix closed into `{"city": "Paris"}`, a key silently dropped), and no
    mode reports the call clean: the guard and the grammar report an invalid_arguments problem
    (a streamed call cannot be retried away), mode off an `unparsed_call` event."""
    from tests.server import fakes
    monkeypatch.setitem(fakes.ATTEMPTS, "overflow_late", [OVERFLOW_LATE, [fakes.WEATHER_CALL]])
    for mode in ("guard", "grammar", "off"):
        fake.engine.attempts.clear()
        deltas, finish = chunks(fake, "overflow_late", hearth={"tool_guard": mode})
        pieces = call_deltas(deltas)
        assert pieces[0]["function"]["name"] == "get_weather" and pieces[0]["function"]["arguments"] == ""
        assert "".join(p["function"]["arguments"] for p in pieces) == '{"city": "Paris", "days": 1e400}', mode
        report = finish["hearth"]
        if mode == "off":
            (event,) = report["events"]
            assert event == {"kind": "unparsed_call", "id": pieces[0]["id"], "name": "get_weather",
                             "error": "the number 1e400 is out of a double's range"}
            continue
        assert report["outcome"] == "unresolved" and report["validation_errors"] == [OVERFLOW_WHY], mode
        if mode == "guard":
            assert report["retry_stopped"] == "1 call(s) already streamed to the client"


def test_a_held_call_that_stops_parsing_is_retried(fake, monkeypatch):
    """The same call under a schema the grammar does not hold: held back, so the guard retries it
    and the client only ever sees the good call."""
    from tests.server import fakes
    monkeypatch.setitem(fakes.ATTEMPTS, "overflow_late", [OVERFLOW_LATE, [fakes.WEATHER_CALL]])
    deltas, finish = chunks(fake, "overflow_late", tools=[LOOSE])
    (piece,) = call_deltas(deltas)
    assert json.loads(piece["function"]["arguments"]) == {"city": "Paris"} and "1e400" not in json.dumps(deltas)
    report = finish["hearth"]
    assert report["outcome"] == "ok" and report["validation_errors"] == [OVERFLOW_WHY]
    assert [(r["kind"], r["reason"]) for r in report["retries"]] == [("resample", "invalid_arguments")]
