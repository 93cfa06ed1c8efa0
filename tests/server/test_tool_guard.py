"""The tool guard on the chat-completions route, against a scripted engine (tests/server/fakes.py)
whose k-th request in a conversation says ATTEMPTS[script][k]: each guard against an output that
needs it, retries and what they send, streaming order, the `hearth` field, counters, bad input."""

from __future__ import annotations

import json
import math

import pytest

from hearth.sample.grammar import stopped
from tests.server import fakes
from tests.server.fakes import TEMPLATE

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"], "additionalProperties": False}}}
OTHER = {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
                                                                        "properties": {"a": {"type": "number"}}}}}
# The fake engine writes what a script says, grammar or not. Under the grammar an argument of the
# wrong type or an undeclared one cannot be written where the grammar holds the tool's schema (such
# a call streams as it is written: tests/server/test_guard_stream.py); `patternProperties` admits
# keys the guard's validator refuses, so the grammar does not hold this one and the guard checks,
# coerces and retries its calls before the client sees them (hearth.tool_guard.held).
LOOSE = {"type": "function", "function": {"name": "get_weather", "parameters": {
    **WEATHER["function"]["parameters"], "patternProperties": {"^x-": {}}}}}


def post(fake, script: str, **kw) -> dict:
    body = {"model": "fake-model", "messages": [{"role": "user", "content": f"script:{script}"}],
            "tools": [WEATHER], **kw}
    r = fake.client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def stream(fake, script: str, **kw) -> list[dict]:
    body = {"model": "fake-model", "messages": [{"role": "user", "content": f"script:{script}"}],
            "tools": [WEATHER], "stream": True, **kw}
    with fake.client.stream("POST", "/v1/chat/completions", json=body) as r:
        lines = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def test_unknown_tool_is_resampled_under_the_forced_grammar(fake):
    r = post(fake, "guard_unknown")
    msg = r["choices"][0]["message"]
    assert [c["function"]["name"] for c in msg["tool_calls"]] == ["get_weather"]
    assert msg["content"] == "Let me check." and r["choices"][0]["finish_reason"] == "tool_calls"
    first, retry = fake.engine.added
    assert "<tool_call>" in first.params.structured_output.grammar and "TEXT" in first.params.structured_output.grammar
    # the resample continues after the text before the bad call, the call grammar from its first token
    assert retry.prompt.startswith(first.prompt) and retry.prompt != first.prompt
    assert "TEXT" not in retry.params.structured_output.grammar
    (entry,) = r["hearth"]["retries"]
    assert entry["kind"] == "resample" and entry["reason"] == "unknown_tool" and "get_wether" in entry["error"]
    assert r["hearth"]["outcome"] == "ok" and r["hearth"]["tool_guard"] == "guard"


def test_a_resample_keeps_the_valid_calls_before_the_bad_one(fake):
    r = post(fake, "guard_second_bad")
    calls = r["choices"][0]["message"]["tool_calls"]
    assert [json.loads(c["function"]["arguments"])["city"] for c in calls] == ["Paris", "Rome"]
    assert [c["id"] for c in calls] == [c["id"] for c in r["hearth"]["calls"]]
    first, retry = fake.engine.added
    assert retry.prompt == first.prompt + "<\n"  # the fake's tokens: one per piece, its first character


def test_a_resample_in_a_leading_region_starts_over(fake):
    """Doubled braces opening the answer, the second call of no offered tool: the resample starts over,
    though each call has its own span for the decline gate (keeping the first call and writing the rest in
    tags made Qwen2.5-Coder-0.5B repeat one call to max_tokens in an openai-agents loop)."""
    r = post(fake, "guard_doubled_second_bad")
    calls = r["choices"][0]["message"]["tool_calls"]
    assert [json.loads(c["function"]["arguments"])["city"] for c in calls] == ["Rome"]
    assert [e["kind"] for e in r["hearth"]["retries"]] == ["resample"]
    first, retry = fake.engine.added
    assert retry.prompt == first.prompt


def test_bad_arguments_resample_then_reprompt_with_the_error(fake):
    r = post(fake, "guard_bad_args", tools=[LOOSE])
    call = r["choices"][0]["message"]["tool_calls"][0]["function"]
    assert json.loads(call["arguments"]) == {"city": "Paris"}
    kinds = [(e["kind"], e["reason"]) for e in r["hearth"]["retries"]]
    assert kinds == [("resample", "invalid_arguments"), ("reprompt", "invalid_arguments")]
    first, _, third = fake.engine.added
    # the re-prompt is the conversation, then the failed call and its error in the tool channel
    assert third.prompt.startswith(first.prompt[:first.prompt.rindex("<|im_start|>assistant")])
    assert "invalid tool call" in third.prompt and "expected string, got integer" in third.prompt
    assert r["hearth"]["validation_errors"][0].startswith("get_weather: arguments: missing required property 'city'")


def test_a_number_json_cannot_carry_is_no_call_and_retried(fake):
    """1e400 is no double: json.dumps wrote it back as Infinity, which strict clients fail on."""
    r = post(fake, "guard_overflow", tool_choice="required")
    calls = r["choices"][0]["message"]["tool_calls"]
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [{"city": "Paris"}]
    assert [(e["kind"], e["reason"]) for e in r["hearth"]["retries"]] == [("resample", "no_call")]
    fake.engine.attempts.clear()
    r = post(fake, "guard_overflow")  # auto: the model's own text, as any call that does not parse
    message = r["choices"][0]["message"]
    assert "1e400" in message["content"] and not message.get("tool_calls")


def test_a_python_call_line_literal_eval_refuses_is_text_not_a_500(fake, monkeypatch):
    # `{[1]: 2}`: ast.literal_eval raises TypeError (unhashable), which the rescue once let through
    monkeypatch.setitem(fakes.SCRIPTS, "py_unhashable", ["Run this:\n\nget_weather(city={[1]: 2})\n"])
    r = post(fake, "py_unhashable")
    message = r["choices"][0]["message"]
    assert not message.get("tool_calls") and "get_weather(city={[1]: 2})" in message["content"]
    assert r["hearth"]["outcome"] == "ok"


def test_safe_coercion_is_made_and_reported(fake):
    r = post(fake, "guard_coerce", tools=[LOOSE])
    call = r["choices"][0]["message"]["tool_calls"][0]["function"]
    assert json.loads(call["arguments"]) == {"city": "Oslo", "days": 3}
    assert r["hearth"]["coercions"] == [{"call": "get_weather", "path": "arguments.days", "from": "3", "to": 3}]
    assert r["hearth"]["retries"] == [] and len(fake.engine.added) == 1


def test_required_but_text_gets_a_call(fake):
    r = post(fake, "guard_text", tool_choice="required")
    assert r["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert [e["reason"] for e in r["hearth"]["retries"]] == ["no_call"]
    assert r["hearth"]["grammar"] == "forced"


def test_retries_run_out_without_a_500_and_are_configurable(fake):
    r = post(fake, "guard_never")
    assert len(fake.engine.added) == 4 and r["hearth"]["outcome"] == "unresolved"
    assert [e["kind"] for e in r["hearth"]["retries"]] == ["resample", "reprompt", "reprompt"]
    msg = r["choices"][0]["message"]  # the last attempt as it parsed: a call of no offered tool is text
    assert msg.get("tool_calls") is None and '"name": "nope"' in msg["content"]
    fake.engine.attempts.clear()
    r = post(fake, "guard_never", hearth={"tool_guard_retries": 1})
    assert len(fake.engine.added) == 6 and len(r["hearth"]["retries"]) == 1


def test_usage_counts_every_attempt(fake):
    r = post(fake, "guard_unknown")
    first, retry = fake.engine.added
    assert r["usage"]["prompt_tokens"] == len(first.prompt) + len(retry.prompt)
    assert r["hearth"]["retries"][0]["prompt_tokens"] == len(retry.prompt)


def after_a_call(fake, script: str, *more: dict, results: tuple[str, ...] = ('{"sky": "sunny"}',) * 2, **kw) -> dict:
    """The conversation after get_weather(Paris) was called and answered, once per result in a row
    (by default twice with the same: a loop), then `more`, asked again."""
    steps = []
    for i, content in enumerate(results):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
        steps += [{"role": "assistant", "content": None, "tool_calls": [call]},
                  {"role": "tool", "tool_call_id": f"c{i}", "content": content}]
    messages = [{"role": "user", "content": f"script:{script}"}, *steps, *more]
    r = fake.client.post("/v1/chat/completions", json={"model": "fake-model", "messages": messages, "tools": [WEATHER], **kw})
    assert r.status_code == 200, r.text
    return r.json()


def test_the_last_steps_call_made_again_in_a_loop_is_reprompted_once_with_its_result(fake):
    r = after_a_call(fake, "guard_repeat")
    msg = r["choices"][0]["message"]
    assert msg.get("tool_calls") is None and msg["content"] == "It is sunny in Paris."
    ((kind, reason),) = [(e["kind"], e["reason"]) for e in r["hearth"]["retries"]]
    assert (kind, reason) == ("reprompt", "repeated_call") and r["hearth"]["outcome"] == "ok"  # no resample: it would repeat
    first, retry = fake.engine.added
    # the re-prompt: the conversation, the repeated call, and in its result the result it ignored
    assert retry.prompt.startswith(first.prompt[:first.prompt.rindex("<|im_start|>assistant")])
    assert "repeated call: get_weather was just called with these same arguments 2 times in a row" in retry.prompt
    assert '\\"sky\\": \\"sunny\\"' in retry.prompt and "answer the user from it" in retry.prompt


def test_a_call_made_again_after_its_error_is_reprompted_and_after_a_plain_result_is_not(fake):
    """Repeating is plainly useless after an error; after one plain result the answer may have changed
    (a polling agent), so the call goes out."""
    r = after_a_call(fake, "guard_repeat", results=('{"error": "weather service timed out"}',))
    assert [e["reason"] for e in r["hearth"]["retries"]] == ["repeated_call"]
    assert "get_weather was just called with these same arguments and failed" in fake.engine.added[1].prompt
    for results in (('{"sky": "sunny"}',), ('{"sky": "cloudy"}', '{"sky": "sunny"}')):
        fake.engine.added.clear()
        r = after_a_call(fake, "guard_repeat_again", results=results)
        assert r["choices"][0]["message"]["tool_calls"] and r["hearth"]["retries"] == [] and len(fake.engine.added) == 1


def test_a_call_repeated_after_its_reprompt_is_the_models_choice(fake):
    r = after_a_call(fake, "guard_repeat_again")
    assert r["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert [e["reason"] for e in r["hearth"]["retries"]] == ["repeated_call"] and r["hearth"]["outcome"] == "ok"
    assert len(fake.engine.added) == 2


@pytest.mark.parametrize("script,retries,attempts", [("guard_repeat_again", 0, 1), ("guard_unknown", 1, 2)])
def test_a_repeated_call_with_no_retry_left_is_delivered_clean(fake, script, retries, attempts):
    """No re-prompt can follow (retries 0, or the last attempt: here a resample's): the repeat is no
    problem to report, the valid call stands."""
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    messages = [{"role": "user", "content": f"script:{script}"}, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": '{"error": "the weather service is down"}'}]
    r = fake.client.post("/v1/chat/completions", json={"model": "fake-model", "messages": messages, "tools": [WEATHER],
                                                       "hearth": {"tool_guard_retries": retries}}).json()
    assert r["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert r["hearth"]["outcome"] == "ok" and len(fake.engine.added) == attempts
    assert "repeated_call" not in json.dumps(r["hearth"]) and "repeated call" not in json.dumps(r["hearth"])


def test_a_repeated_call_whose_reprompt_does_not_fit_is_delivered_clean(make_fake):
    """The re-prompt (the call and its result quoted) would not fit the context: no re-prompt can
    follow, so the repeat is no problem either; retry_stopped says why."""
    from tests.server.fakes import FakeEngine
    roomy = make_fake(engine=FakeEngine(max_model_len=100_000))
    after_a_call(roomy, "guard_repeat_again", max_tokens=20)
    n = len(roomy.engine.added[0].prompt)
    fake = make_fake(engine=FakeEngine(max_model_len=n + 20))
    r = after_a_call(fake, "guard_repeat_again", max_tokens=20)
    assert r["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert r["hearth"]["outcome"] == "ok" and r["hearth"]["validation_errors"] == [] and r["hearth"]["retries"] == []
    assert "would not leave room" in r["hearth"]["retry_stopped"] and len(fake.engine.added) == 1


def test_the_same_call_after_a_new_user_turn_or_outside_guard_mode_is_not_a_repeat(fake):
    again = {"role": "user", "content": "and now? script:guard_repeat_again"}
    r = after_a_call(fake, "guard_repeat_again", again)
    assert r["choices"][0]["message"]["tool_calls"] and r["hearth"]["retries"] == [] and len(fake.engine.added) == 1
    for mode in ("grammar", "off"):
        fake.engine.added.clear()
        r = after_a_call(fake, "guard_repeat_again", hearth={"tool_guard": mode})
        assert r["choices"][0]["message"]["tool_calls"] and len(fake.engine.added) == 1


def test_stream_sends_text_as_it_comes_and_the_call_once_it_validated(fake):
    chunks = stream(fake, "guard_unknown", tools=[LOOSE])  # a schema the grammar does not hold
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    text_at = next(i for i, d in enumerate(deltas) if d.get("content"))
    calls = [(i, tc) for i, d in enumerate(deltas) for tc in d.get("tool_calls") or []]
    assert len(calls) == 1 and calls[0][0] > text_at  # one delta: the whole validated call
    (_, tc), = calls
    assert tc["function"]["name"] == "get_weather" and json.loads(tc["function"]["arguments"]) == {"city": "Paris"}
    assert "get_wether" not in json.dumps(deltas)  # the rejected call never went out
    assert "".join(d.get("content") or "" for d in deltas) == "Let me check."
    last = next(c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"])
    assert last["choices"][0]["finish_reason"] == "tool_calls" and last["hearth"]["retries"][0]["kind"] == "resample"


def test_extension_field_says_what_was_done(fake):
    r = post(fake, "tool")
    ext = r["hearth"]
    assert ext["tool_guard"] == "guard" and ext["grammar"] == "lazy" and ext["grammar_triggered"] is True
    assert ext["retries"] == [] and ext["coercions"] == [] and ext["validation_errors"] == [] and ext["outcome"] == "ok"
    (call,) = ext["calls"]
    assert call["name"] == "get_weather" and call["id"] == r["choices"][0]["message"]["tool_calls"][0]["id"]
    # the fake engine gives every sampled token logprob -0.5: the lowest probability in the call
    assert call["confidence"] == pytest.approx(math.exp(-0.5), abs=1e-6)
    assert r["choices"][0]["logprobs"] is None  # asked for internally, not shown
    plain = post(fake, "hello")
    assert plain["hearth"]["grammar_triggered"] is False and plain["hearth"]["calls"] == []


def test_a_call_whose_tool_the_grammar_chose_is_declined(fake):
    """An answer that opened like a call, whose name's first token the model itself gave almost no
    probability before the grammar's mask (the lazy grammar bent it from a tool nobody offered),
    though over the allowed tokens it read p ~ 1: no call, and the answer from its opener on is the
    model's own, written again without the grammar (same params, the same prefix: here all of it)."""
    r = post(fake, "guard_forced_name")
    first, again = fake.engine.added
    assert first.params.raw_logprobs  # the guard asked the engine for raw logprobs
    assert again.prompt == first.prompt and again.params.structured_output is None and not again.params.raw_logprobs
    assert again.params.temperature == first.params.temperature and again.params.seed == first.params.seed
    msg = r["choices"][0]["message"]
    assert msg.get("tool_calls") is None and r["choices"][0]["finish_reason"] == "stop"
    assert msg["content"] == '```json\n{"name": "triangle_area", "arguments": {"base": 3}}\n```'
    (event,) = [e for e in r["hearth"]["events"] if e["kind"] == "declined"]
    # the share of the model's probability the grammar allowed: raw / masked, exp(-6.0) / exp(-0.01)
    assert event["name"] == "get_weather" and event["name_prob"] == pytest.approx(math.exp(-5.99), rel=1e-2)
    assert event["rewritten"] == "unconstrained"
    assert r["hearth"]["calls"] == [] and r["hearth"]["retries"] == []
    assert r["hearth"]["grammar_triggered"] is True  # it bent the name: it read false once the call was gone
    assert r["usage"]["completion_tokens"] == 6  # both requests' tokens, as a resample's count
    fake.engine.attempts.clear()
    sure = post(fake, "guard_sure_name")  # the same output, the name the model's own choice: a call
    assert sure["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert not [e for e in sure["hearth"].get("events", []) if e["kind"] == "declined"]
    (call,) = sure["hearth"]["calls"]  # what the gate read, beside the confidence over allowed tokens
    assert call["name_prob"] == pytest.approx(math.exp(-0.15), rel=1e-2) and call["confidence"] == pytest.approx(math.exp(-0.5))
    off = post(fake, "guard_forced_name", hearth={"tool_guard_decline_below": 0})  # the gate off: a call
    assert off["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert off["hearth"]["calls"][0]["name_prob"] == pytest.approx(math.exp(-5.99), rel=1e-2)
    fake.engine.attempts.clear()
    forced = post(fake, "guard_forced_name", tool_choice="required")  # a call was asked for: kept
    assert forced["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert len(fake.engine.added) == 5  # one request each: nothing written again


def test_a_name_bent_after_its_first_token_is_declined(fake):
    """The model's name and an offered one share their first token (`get`): the grammar bent the name
    where it went on, which the model gave almost nothing; the gate reads the lowest over the name's
    tokens of the share of the model's raw probability the grammar allowed, so the call is
    declined as one bent at its first token is (it read 0.836, the shared `get`, and stayed a call:
    BFCL irrelevance_36 on Qwen2.5-Coder-1.5B). A name the model was torn on among offered tools (raw
    0.30 at `_weather`, under the floor, but 0.61 of its probability on allowed tokens) stays a call."""
    r = post(fake, "guard_bent_late")
    first, again = fake.engine.added
    assert again.prompt == first.prompt and again.params.structured_output is None
    msg = r["choices"][0]["message"]
    assert msg.get("tool_calls") is None and r["choices"][0]["finish_reason"] == "stop"
    assert msg["content"] == '```json\n{"name": "get_frequency", "arguments": {"gene": "rs7412"}}\n```'
    (event,) = [e for e in r["hearth"]["events"] if e["kind"] == "declined"]
    assert event["name"] == "get_weather" and event["name_prob"] == pytest.approx(math.exp(-4.99), rel=1e-2)
    fake.engine.attempts.clear()
    chunks = stream(fake, "guard_bent_late")
    assert not [d for c in chunks if c["choices"] for d in [c["choices"][0]["delta"]] if d.get("tool_calls")]
    assert [e["kind"] for e in chunks[-1]["hearth"]["events"]] == ["declined"]
    fake.engine.attempts.clear()
    sure = post(fake, "guard_sure_late")  # torn among offered tools at `_weather`: raw 0.30, masked 0.50
    assert sure["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert sure["hearth"]["calls"][0]["name_prob"] == pytest.approx(math.exp(-0.5), rel=1e-2)


def test_a_declined_call_is_the_models_own_text_not_the_grammars(fake):
    """The trial's case: asked for a joke with only get_weather offered, the answer opened as a bare
    object whose name the grammar bent to get_weather (and went on to invent its arguments); declined,
    the answer is what the model writes without the grammar, and the text the bent call was followed
    by is gone with it, streamed or not."""
    own = '{"name": "Cat Joke", "arguments": {"cat": "Meow"}}'
    r = post(fake, "guard_bent_joke")
    msg = r["choices"][0]["message"]
    assert msg["content"] == own and msg.get("tool_calls") is None and r["choices"][0]["finish_reason"] == "stop"
    (event,) = [e for e in r["hearth"]["events"] if e["kind"] == "declined"]
    assert event == {"kind": "declined", "name": "get_weather", "name_prob": pytest.approx(math.exp(-6.99), rel=1e-2),
                     "rewritten": "unconstrained"}
    fake.engine.attempts.clear()
    chunks = stream(fake, "guard_bent_joke")
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("content") or "" for d in deltas) == own and not [d for d in deltas if d.get("tool_calls")]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert [e["kind"] for e in chunks[-1]["hearth"]["events"]] == ["declined"]
    assert r["hearth"]["grammar_triggered"] is True and chunks[-1]["hearth"]["grammar_triggered"] is True


def test_text_held_after_a_call_the_gate_doubts_goes_out_when_it_is_retried_instead(fake):
    """A stream holds the text after a call whose name the gate doubts until the guard decides; a call
    that fails its schema is resampled (no decline: the retry decides), and that text is sent as before."""
    whole = post(fake, "guard_bent_bad_args", tools=[LOOSE])
    fake.engine.attempts.clear()
    chunks = stream(fake, "guard_bent_bad_args", tools=[LOOSE])
    for msg, hearth in ((whole["choices"][0]["message"], whole["hearth"]),
                        (streamed_message(chunks), chunks[-1]["hearth"])):
        assert msg["content"].strip() == "Done." and [c["function"]["name"] for c in msg["tool_calls"]] == ["get_weather"]
        assert [r["kind"] for r in hearth["retries"]] == ["resample"]
        assert not [e for e in hearth.get("events", []) if e["kind"] == "declined"]


def streamed_message(chunks: list[dict]) -> dict:
    """A stream's chunks as a whole message: its content and its calls' names."""
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    calls = [{"function": {"name": t["function"]["name"]}} for d in deltas for t in d.get("tool_calls") or []
             if t.get("function", {}).get("name")]
    return {"content": "".join(d.get("content") or "" for d in deltas), "tool_calls": calls}


def test_the_gate_reads_each_name_of_a_leading_doubled_brace_region(fake):
    """`{{"name": ...}}}` opening the answer, then another: the parser reads both calls, and the gate
    reads each one's name in its own span (it read none when the region was one span for two calls)."""
    r = post(fake, "guard_doubled_two")
    msg = r["choices"][0]["message"]
    assert [json.loads(c["function"]["arguments"]) for c in msg["tool_calls"]] == [{"city": "Paris"}]
    # declined: the model's own text from the second call's opener on (its prefix ends inside the first
    # call's last token: the client has those bytes, so they are not sent again)
    assert msg["content"] == '\n{{"name": "hotel_rooms", "arguments": {}}}'
    assert fake.engine.added[1].prompt == fake.engine.added[0].prompt + '{g'  # the fake's tokens: one per piece
    (call,) = r["hearth"]["calls"]
    assert call["name_prob"] == pytest.approx(math.exp(-0.19), rel=1e-2)
    (event,) = [e for e in r["hearth"]["events"] if e["kind"] == "declined"]
    assert event["name_prob"] == pytest.approx(math.exp(-5.99), rel=1e-2)
    fake.engine.attempts.clear()
    off = post(fake, "guard_doubled_two", hearth={"tool_guard_decline_below": 0})  # the gate off: two calls
    assert [c["name_prob"] for c in off["hearth"]["calls"]] == [pytest.approx(math.exp(-0.19), rel=1e-2),
                                                                  pytest.approx(math.exp(-5.99), rel=1e-2)]


def test_modes(fake):
    r = post(fake, "tool", hearth={"tool_guard": "off"})
    assert "hearth" not in r and fake.last.params.structured_output is None and fake.last.params.logprobs is None
    r = post(fake, "guard_coerce", hearth={"tool_guard": "grammar"})
    assert r["hearth"]["tool_guard"] == "grammar" and r["hearth"]["coercions"] == []
    assert json.loads(r["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])["days"] == "3"
    assert "<tool_call>" in fake.last.params.structured_output.grammar
    assert "hearth" not in post(fake, "hello", tools=None)  # no tools, no layer


def test_server_default_mode(make_fake):
    from hearth.tool_guard import GuardConfig
    fake = make_fake(TEMPLATE, tool_guard=GuardConfig("off"))
    assert "hearth" not in post(fake, "tool")
    assert post(fake, "tool", hearth={"tool_guard": "guard"})["hearth"]["tool_guard"] == "guard"


def test_parallel_false_and_allowed_tools_narrow_the_grammar(fake):
    post(fake, "tool", tools=[WEATHER, OTHER], parallel_tool_calls=False)
    grammar = fake.last.params.structured_output.grammar
    assert "main: TEXT | call END_WS" in grammar and '"\\"add\\""' in grammar
    choice = {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [
        {"type": "function", "function": {"name": "get_weather"}}]}}
    post(fake, "tool", tools=[WEATHER, OTHER], tool_choice=choice)
    grammar = fake.last.params.structured_output.grammar
    assert '"\\"get_weather\\""' in grammar and '"\\"add\\""' not in grammar and '"add"' in fake.last.prompt
    choice["allowed_tools"]["mode"] = "required"
    post(fake, "tool", tools=[WEATHER, OTHER], tool_choice=choice)
    forced = fake.last.params.structured_output.grammar
    assert "get_weather" in forced and '"add"' not in forced and "TEXT" not in forced


def test_metrics_count_the_guard(fake):
    post(fake, "guard_unknown")
    post(fake, "guard_coerce", tools=[LOOSE])
    text = fake.client.get("/metrics").text
    assert 'hearth:tool_guard_retries_total{kind="resample",model_name="fake-model",reason="unknown_tool"} 1.0' in text
    assert 'hearth:tool_guard_coercions_total{model_name="fake-model"} 1.0' in text
    assert 'hearth:tool_guard_grammar_triggered_total{model_name="fake-model"} 2.0' in text
    assert "hearth:tool_guard_call_confidence_bucket" in text


@pytest.mark.parametrize("ext,param", [
    ({"tool_guard": "strict"}, "hearth.tool_guard"),
    ({"tool_guard_retries": 99}, "hearth.tool_guard_retries"),
    ({"tool_guard_decline_below": 1.5}, "hearth.tool_guard_decline_below"),
    ({"tool_guard_decline_below": "low"}, "hearth.tool_guard_decline_below"),
    ("guard", "hearth"),
])
def test_bad_extension_is_a_400_naming_the_field(fake, ext, param):
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "hearth": ext}
    r = fake.client.post("/v1/chat/completions", json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    assert r.json()["error"]["message"].startswith(param + ":")


def test_bad_allowed_tools_is_a_400(fake):
    choice = {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [{"type": "function", "name": "nope"}]}}
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "tools": [WEATHER],
            "tool_choice": choice}
    r = fake.client.post("/v1/chat/completions", json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice.allowed_tools.tools[0]"


def test_anthropic_messages_go_through_the_guard(fake):
    tool = {"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}
    body = {"model": "fake-model", "max_tokens": 64, "tools": [tool],
            "messages": [{"role": "user", "content": "script:guard_unknown"}]}
    r = fake.client.post("/v1/messages", json=body)
    assert r.status_code == 200, r.text
    blocks = r.json()["content"]
    assert [b["type"] for b in blocks] == ["text", "tool_use"] and blocks[1]["input"] == {"city": "Paris"}
    assert r.json()["stop_reason"] == "tool_use" and r.json()["hearth"]["retries"][0]["kind"] == "resample"
    fake.engine.attempts.clear()
    with fake.client.stream("POST", "/v1/messages", json={**body, "stream": True}) as s:
        text = "".join(s.iter_text())
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    starts = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    assert [b["type"] for b in starts] == ["text", "tool_use"] and starts[1]["name"] == "get_weather"
    assert events[0]["message"]["usage"]["input_tokens"] > 0  # the guarded attempt's prompt, from the start
    (delta,) = [e for e in events if e["type"] == "message_delta"]
    assert delta["delta"]["stop_reason"] == "tool_use" and delta["hearth"]["outcome"] == "ok"


def test_each_choice_is_guarded(fake):
    r = post(fake, "guard_coerce", n=2, tools=[LOOSE])
    assert [json.loads(c["message"]["tool_calls"][0]["function"]["arguments"])["days"] for c in r["choices"]] == [3, 3]
    assert len(r["hearth"]["choices"]) == 2 and all(c["coercions"] for c in r["hearth"]["choices"])
    chunks = stream(fake, "guard_coerce", n=2, tools=[LOOSE])
    finals = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert sorted(c["choices"][0]["index"] for c in finals) == [0, 1] and all(c["hearth"]["coercions"] for c in finals)


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_too_long_is_a_400_before_any_stream(make_fake, stream):
    from tests.server.fakes import FakeEngine
    fake = make_fake(TEMPLATE, FakeEngine(max_model_len=300))
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "x" * 400}], "tools": [WEATHER],
            "stream": stream}
    r = fake.client.post("/v1/chat/completions", json=body)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text


def test_the_call_grammar_giving_up_names_the_tools(fake, monkeypatch):
    """The grammar engine gives up on the call grammar the layer built (the client sent none): a 400
    naming `tools`, not one blaming a json_schema or grammar the client never sent."""
    real = fakes.FakeStream.__anext__

    async def anext(self):
        so = self.params.structured_output
        if so is not None and so.grammar:
            raise stopped(so, "parser row too large\\nstate ...")
        return await real(self)

    monkeypatch.setattr(fakes.FakeStream, "__anext__", anext)
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "script:guard_unknown"}], "tools": [WEATHER]}
    r = fake.client.post("/v1/chat/completions", json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools", r.text
    assert r.json()["error"]["message"].startswith("tools: the call grammar of these tools: the grammar engine gave up")


@pytest.mark.parametrize("n", [2, 3])
def test_usage_counts_the_prompt_once_for_n_choices(fake, n):
    """OpenAI and vLLM count the prompt once for n > 1; completion tokens are every choice's."""
    def usage(**kw):
        fake.engine.attempts.clear()
        fake.engine.added.clear()
        return post(fake, "guard_coerce", temperature=0, tools=[LOOSE], tool_choice="required", **kw)["usage"]
    fake.engine.cached = 5  # each attempt says 5 of its prompt came from the prefix cache
    one = usage(hearth={"tool_guard": "off"})
    guarded, off = usage(n=n), usage(n=n, hearth={"tool_guard": "off"})
    assert guarded["prompt_tokens"] == off["prompt_tokens"] == one["prompt_tokens"]
    assert guarded["prompt_tokens_details"]["cached_tokens"] == off["prompt_tokens_details"]["cached_tokens"]
    assert guarded["completion_tokens"] == off["completion_tokens"] == n * one["completion_tokens"]


def test_a_forced_call_of_a_tool_with_definitions_is_taken(fake):
    """A pydantic model's tool (its nested model in `$defs`) under tool_choice required was a 400: "invalid
    grammar ... Pointer '/$defs/Quantity' does not exist" (its refs stood under the call object's `arguments`)."""
    from tests.tool_parsers.test_schema import MEASURE
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "tools": [MEASURE],
            "tool_choice": "required", "max_tokens": 4}
    r = fake.client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
