"""The tool guard's request-side parts through the HTTP routes, on the scripted engine: calls rescued
from text, hearth.workflow nudges inside one request (retries of kind "nudge" in the guard's loop),
tools ranked down to the relevant ones, tiered compaction instead of a context-length 400, the
`hearth` response field (its `events` and `retries`), and a 400 naming the field for each bad
extension value.

A script's output may name the next script (`script:NAME`): a nudge puts the output back into the
prompt, so the retry follows that script, as a model that took the nudge would."""

from __future__ import annotations

import json

import pytest

from tests.server import fakes
from tests.server.fakes import FakeEngine


def fn(name: str, description: str = "", **params: str) -> dict:
    props = {p: {"type": "string", "description": d} for p, d in params.items()}
    return {"type": "function", "function": {"name": name, "description": description,
                                             "parameters": {"type": "object", "properties": props}}}


WEATHER = fn("get_weather", "weather in a city", city="city")
SEARCH = fn("search", "search hotels", city="city")
BOOK = fn("book", "book a hotel", city="city")
FLOW = {"required": ["search", "book"], "prerequisites": [{"tool": "book", "after": "search", "match": ["city"]}]}


def call(name: str, **args) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(args)}}}\n</tool_call>'


@pytest.fixture(autouse=True)
def scripts(monkeypatch):
    for name, pieces in {
        "prose_call": ['Sure! {{"name": "get_weather", ', '"arguments": {"city": "Paris"}}}'],
        "prose_bad_call": ['Sure! {{"name": "get_weather", "arguments": {"city": ["Paris"]}}}'],
        "unknown_call": ['{"name": "delete_all", "arguments": {}}'],
        "premature": ["All booked! script:do_search"],
        "do_search": [call("search", city="Paris")],
        "stubborn": ["No. script:stubborn"],
        "book_first": ["script:fixed ", call("book", city="Paris")],
        "fixed": [call("search", city="Paris")],
        "again": ["script:answer ", call("search", city="Paris")],
        "answer": ["Found 3 hotels."],
    }.items():
        monkeypatch.setitem(fakes.SCRIPTS, name, pieces)


def post(fake, messages, stream: bool = False, **body):
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    return fake.client.post("/v1/chat/completions", json={"messages": messages, "stream": stream, **body})


def sse(r) -> list[dict]:
    return [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]


def kinds(body: dict) -> list[str]:
    return [e["kind"] for e in body.get("hearth", {}).get("events", [])]


def nudges(body: dict) -> list[dict]:
    """The workflow nudges: the guard's retries of kind nudge (no other retry may have happened)."""
    retries = body["hearth"]["retries"]
    assert all(r["kind"] == "nudge" for r in retries)
    return retries


# point 4: rescue

def test_disguised_call_becomes_a_call(fake):
    body = post(fake, "script:prose_call", tools=[WEATHER]).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == "Sure!"
    (tc,) = choice["message"]["tool_calls"]
    assert tc["function"]["name"] == "get_weather" and json.loads(tc["function"]["arguments"]) == {"city": "Paris"}
    assert body["hearth"]["events"] == [{"kind": "rescued", "calls": [{"name": "get_weather", "from": "doubled_braces"}]}]


def test_disguised_call_streamed_comes_at_the_end(fake):
    chunks = sse(post(fake, "script:prose_call", stream=True, tools=[WEATHER]))
    calls = [tc for c in chunks for tc in c["choices"][0]["delta"].get("tool_calls") or []]
    assert [tc["function"]["name"] for tc in calls] == ["get_weather"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls" and kinds(chunks[-1]) == ["rescued"]


def test_prose_where_a_call_was_required_is_retried(fake):
    """Prose where tool_choice required a call (a model that ignored the grammar) is the guard's
    no_call problem: resampled under the call grammar, then re-prompted; bounded, never a 500."""
    body = post(fake, "script:premature", tools=[SEARCH, BOOK], tool_choice="required").json()
    assert [tc["function"]["name"] for tc in body["choices"][0]["message"]["tool_calls"]] == ["search"]
    retries = body["hearth"]["retries"]
    assert [(r["kind"], r["reason"]) for r in retries] == [("resample", "no_call"), ("reprompt", "no_call")]
    assert "a tool call was required" in fake.engine.added[-1].prompt and body["hearth"]["outcome"] == "ok"
    assert body["choices"][0]["message"]["content"] is None  # the superseded prose is not the answer
    body = post(fake, "script:stubborn", tools=[SEARCH, BOOK], tool_choice="required").json()
    assert [r["reason"] for r in body["hearth"]["retries"]] == ["no_call"] * 3
    assert body["hearth"]["outcome"] == "unresolved" and body["choices"][0]["message"]["content"]


def test_a_rescued_call_is_validated_and_retried_like_any_other(fake):
    """Rescue wraps the guard's own parser: its calls meet the same schema check and retries."""
    body = post(fake, "script:prose_bad_call", tools=[WEATHER]).json()
    assert kinds(body)[:1] == ["rescued"] and body["hearth"]["retries"]
    assert {r["reason"] for r in body["hearth"]["retries"]} == {"invalid_arguments"}
    assert body["hearth"]["outcome"] == "unresolved" and "get_weather" in body["hearth"]["validation_errors"][0]


@pytest.mark.parametrize("first,content", [
    (['Let me look: {"name": "get_weather", "arguments": {"city": ["Paris"]}}',
      ' and {"name": "get_weather", "arguments": {"city": "Rome"}}'], None),
    (['Here you go: ', '{"name": "get_weather", "arguments": {"city": ["Paris"]}}',
      '\n{"name": "get_weather", "arguments": {"city": "Rome"}}'], None),
])
def test_a_resample_of_a_rescued_call_drops_the_text_it_wrote_again(fake, monkeypatch, first, content):
    """Calls in prose (no opener) whose first fails its schema: the resample starts over, so a whole
    answer is the resample's; it kept the first attempt's prose, calls and all, as content beside the
    resampled call (a new user's trial, 2026-12-06, fourteenth session)."""
    monkeypatch.setitem(fakes.ATTEMPTS, "prose_resample", [first, ['{"name": "get_weather", "arguments": {"city": "Oslo"}}']])
    body = post(fake, "script:prose_resample", tools=[WEATHER]).json()
    msg = body["choices"][0]["message"]
    assert [r["kind"] for r in body["hearth"]["retries"]] == ["resample"]
    assert [json.loads(tc["function"]["arguments"]) for tc in msg["tool_calls"]] == [{"city": "Oslo"}]
    assert msg["content"] == content
    fake.engine.attempts.clear()
    streamed = sse(post(fake, "script:prose_resample", stream=True, tools=[WEATHER]))  # a stream sent it already
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in streamed if c["choices"]).startswith(first[0][:9])


def test_metrics_count_the_events_next_to_the_guard(make_fake):
    fake = roomy(make_fake)
    post(fake, "script:prose_call", tools=[WEATHER])
    post(fake, "weather in Oslo", tools=MANY)
    text = fake.client.get("/metrics").text
    assert 'hearth:tool_guard_events_total{kind="rescued",model_name="fake-model"} 1.0' in text
    assert 'hearth:tool_guard_events_total{kind="tools_ranked",model_name="fake-model"} 1.0' in text


def test_no_call_of_a_tool_nobody_offered(fake):
    body = post(fake, "script:unknown_call", tools=[WEATHER]).json()
    message = body["choices"][0]["message"]
    assert "tool_calls" not in message and message["content"] == '{"name": "delete_all", "arguments": {}}'
    assert body["hearth"]["outcome"] == "unresolved" and kinds(body) == []  # retried, never rescued


def test_no_tools_no_rescue(fake):
    body = post(fake, "script:prose_call").json()
    assert body["choices"][0]["message"]["content"].startswith("Sure! {{") and "hearth" not in body


# point 5: workflow

def test_premature_answer_is_nudged_once_then_the_call_comes(fake):
    body = post(fake, "script:premature", tools=[SEARCH, BOOK], hearth={"workflow": FLOW}).json()
    (tc,) = body["choices"][0]["message"]["tool_calls"]
    assert tc["function"]["name"] == "search"
    (nudge,) = nudges(body)
    assert nudge["reason"] == "premature_answer" and "call search, book first" in nudge["error"]
    assert body["hearth"]["outcome"] == "ok" and kinds(body) == []
    first, second = fake.engine.added
    assert "call search, book first" in second.prompt and second.prompt.startswith(first.prompt[:-40])
    assert body["usage"]["prompt_tokens"] == len(first.prompt) + len(second.prompt)


def test_nudges_escalate_and_stop(fake):
    body = post(fake, "script:stubborn", tools=[SEARCH, BOOK], hearth={"workflow": FLOW}).json()
    assert body["choices"][0]["message"]["content"] == "No. script:stubborn"  # returned as it is, no 500
    first, second = nudges(body)
    assert [first["reason"], second["reason"]] == ["premature_answer"] * 2 and body["hearth"]["outcome"] == "unresolved"
    added = fake.engine.added
    assert first["error"] in added[1].prompt and second["error"] + " This is required" in added[2].prompt  # firmer
    assert len(added) == 3 and "TEXT" in added[1].params.structured_output.grammar and "forced" not in first  # lazy
    grammar = added[2].params.structured_output.grammar  # the last nudge forces a call of the missing tools
    assert '"search"' in grammar and '"book"' in grammar and "TEXT" not in grammar
    assert second["forced"] == ["search", "book"]
    capped = post(fake, "script:stubborn", tools=[SEARCH, BOOK], hearth={"workflow": {**FLOW, "max_nudges": 0}}).json()
    assert capped["hearth"]["retries"] == [] and capped["hearth"]["outcome"] == "unresolved"
    assert len(fake.engine.added) == 4


def test_call_before_its_prerequisite_gets_an_error_result(fake):
    body = post(fake, "script:book_first", tools=[SEARCH, BOOK], hearth={"workflow": FLOW}).json()
    assert [tc["function"]["name"] for tc in body["choices"][0]["message"]["tool_calls"]] == ["search"]
    assert [r["reason"] for r in nudges(body)] == ["missing_prerequisite"]
    assert "error: book can only be called after search with the same city" in fake.engine.added[1].prompt


def test_loop_is_caught_from_the_history(fake):
    def searched(i):
        return [{"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "search", "arguments": '{"city": "Paris"}'}}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": "3 hotels"}]
    history = [{"role": "user", "content": "hotels in Paris? script:again"}] + searched(0) + searched(1)
    body = post(fake, history, tools=[SEARCH, BOOK], hearth={"workflow": {"max_repeats": 2}}).json()
    assert body["choices"][0]["message"]["content"] == "Found 3 hotels."
    assert [r["reason"] for r in nudges(body)] == ["repeated_call"]


def test_workflow_streamed_is_answered_after_review(fake):
    chunks = sse(post(fake, "script:premature", stream=True, tools=[SEARCH, BOOK], hearth={"workflow": FLOW},
                      stream_options={"include_usage": True}))
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    calls = [tc for c in chunks if c["choices"] for tc in c["choices"][0]["delta"].get("tool_calls") or []]
    assert [tc["function"]["name"] for tc in calls] == ["search"] and calls[0]["index"] == 0
    finish = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert finish[0]["choices"][0]["finish_reason"] == "tool_calls"
    assert [r["reason"] for r in nudges(finish[0])] == ["premature_answer"]
    # a reviewed answer is shown once reviewed: the nudged-away text never reaches the client
    assert not [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 2


def test_sdk_reads_a_reviewed_stream(fake):
    stream = fake.openai.chat.completions.create(model="fake-model", stream=True, tools=[SEARCH, BOOK],
                                                 messages=[{"role": "user", "content": "script:premature"}],
                                                 extra_body={"hearth": {"workflow": FLOW}})
    names = [tc.function.name for c in stream for tc in c.choices[0].delta.tool_calls or [] if tc.function.name]
    assert names == ["search"]


# point 7: many tools

MANY = [fn(f"tool_{i}", f"does thing number {i}") for i in range(38)] + [WEATHER, BOOK]  # above the default cap


def test_many_tools_only_the_top_k_are_rendered_and_allowed(fake):
    body = post(fake, "What is the weather in the city of Oslo?", tools=MANY, tool_choice="required",
                hearth={"max_tools": 3}).json()
    prompt = fake.engine.added[-1].prompt
    shown = [t["function"]["name"] for t in MANY if f'"{t["function"]["name"]}"' in prompt]
    (event,) = body["hearth"]["events"]
    assert len(shown) == 3 and "get_weather" in shown and event == {"kind": "tools_ranked", "offered": 40, "shown": shown}
    grammar = fake.engine.added[-1].params.structured_output.grammar
    assert all((f'"{t["function"]["name"]}"' in grammar) == (t["function"]["name"] in shown) for t in MANY)


def test_ranked_tools_are_all_the_lazy_grammar_allows(fake):
    """In auto the lazy call grammar (plan.callable) holds the same top-k as the prompt."""
    body = post(fake, "What is the weather in the city of Oslo?", tools=MANY, hearth={"max_tools": 3}).json()
    shown = body["hearth"]["events"][0]["shown"]
    grammar = fake.engine.added[-1].params.structured_output.grammar
    assert "TEXT" in grammar and len(shown) == 3  # lazy: free text until a call opens
    assert all((f'\\"{t["function"]["name"]}\\"' in grammar) == (t["function"]["name"] in shown) for t in MANY)


def roomy(make_fake):
    """A fake whose context holds MANY's tools unranked."""
    return make_fake(engine=FakeEngine(max_model_len=16384))


def test_default_cap_and_few_tools(make_fake):
    fake = roomy(make_fake)
    from hearth.tool_guard.tool_rank import DEFAULT_MAX_TOOLS
    assert DEFAULT_MAX_TOOLS == 32
    post(fake, "hi", tools=MANY[:32])
    assert "tool_31" in fake.engine.added[-1].prompt and not post(fake, "hi", tools=MANY[:32]).json()["hearth"]["events"]
    body = post(fake, "weather in Oslo", tools=MANY).json()  # 40 > 32: ranked to 32
    assert len(body["hearth"]["events"][0]["shown"]) == 32


# point 6: compaction

def long_chat(steps: int) -> list[dict]:
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Read the files."}]
    for i in range(steps):
        msgs += [{"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"result {i} " + "x" * 300}]
    return msgs


def test_too_long_is_a_400_without_compaction(make_fake):
    fake = make_fake(engine=FakeEngine(max_model_len=1500))
    r = post(fake, long_chat(6), tools=[WEATHER])
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"


def test_tiered_compaction_fits_and_says_what_it_did(make_fake):
    fake = make_fake(engine=FakeEngine(max_model_len=1500))
    body = post(fake, long_chat(6), tools=[WEATHER], max_tokens=50,
                hearth={"compaction": {"mode": "tiered", "keep_last": 2}}).json()
    (event,) = body["hearth"]["events"]
    assert event["kind"] == "compacted" and event["tiers"][0] == "shorten_tool_results"
    assert event["prompt_tokens_before"] >= 1500 and event["prompt_tokens_after"] + 50 < 1500
    prompt = fake.engine.added[-1].prompt
    assert len(prompt) == event["prompt_tokens_after"] == body["usage"]["prompt_tokens"]
    assert "Be brief." in prompt and "Read the files." in prompt and "result 5 " + "x" * 300 in prompt


def test_a_re_prompt_is_compacted_too_and_reported(make_fake):
    """The first prompt fits; the guard's re-prompt (the failed call and its error appended) does
    not, and is compacted rather than given up; the report says so."""
    chat = long_chat(4)
    chat[1] = {"role": "user", "content": "Read the files. script:unknown_call"}
    ext = {"compaction": {"mode": "tiered", "keep_last": 1}, "tool_guard_retries": 2}
    roomy = make_fake(engine=FakeEngine(max_model_len=100_000))
    post(roomy, chat, tools=[WEATHER], max_tokens=50, hearth=ext)
    first = len(roomy.engine.added[0].prompt)
    fake = make_fake(engine=FakeEngine(max_model_len=first + 50 + 20))
    body = post(fake, chat, tools=[WEATHER], max_tokens=50, hearth=ext).json()
    assert [r["kind"] for r in body["hearth"]["retries"]] == ["resample", "reprompt"]
    (event,) = body["hearth"]["events"]
    assert event["kind"] == "compacted" and event["prompt_tokens_after"] + 50 < first + 70
    first_prompt, _, reprompt = (a.prompt for a in fake.engine.added)
    assert len(first_prompt) == first and "result 0 " + "x" * 300 not in reprompt and "no tool named" in reprompt


def test_a_prompt_that_fits_exactly_is_not_compacted(make_fake):
    """prompt + max_tokens == the context fits (as the engine and check_room have it): compaction
    leaves it whole; one token less of context and it compacts."""
    chat, ext = long_chat(2), {"compaction": {"mode": "tiered", "keep_last": 1}}
    roomy = make_fake(engine=FakeEngine(max_model_len=100_000))
    post(roomy, chat, tools=[WEATHER], max_tokens=50)
    n = len(roomy.engine.added[0].prompt)
    fake = make_fake(engine=FakeEngine(max_model_len=n + 50))
    r = post(fake, chat, tools=[WEATHER], max_tokens=50, hearth=ext)
    assert r.status_code == 200, r.text
    assert r.json()["hearth"]["events"] == [] and len(fake.engine.added[0].prompt) == n
    tight = make_fake(engine=FakeEngine(max_model_len=n + 49))
    (event,) = post(tight, chat, tools=[WEATHER], max_tokens=50, hearth=ext).json()["hearth"]["events"]
    assert event["kind"] == "compacted" and event["prompt_tokens_after"] + 50 <= n + 49


@pytest.mark.parametrize("model_context,hint", [(200, False), (1000, True)])
def test_compaction_that_cannot_fit_is_still_a_400(make_fake, model_context, hint):
    """--max-model-len is offered only below the model's own context (hearth.errors.can_raise_context)."""
    fake = make_fake(engine=FakeEngine(max_model_len=200, model_context=model_context))
    r = post(fake, [{"role": "user", "content": "y" * 400}], hearth={"compaction": "tiered"})
    message = r.json()["error"]["message"]
    assert r.status_code == 400 and "even compacted" in message
    assert ("raise --max-model-len" in message) == hint


# bad input

@pytest.mark.parametrize("hearth,param", [
    ("guard", "hearth"),
    ({"workflows": {}}, "hearth.workflows"),
    ({"workflow": {"required": ["nope"]}}, "hearth.workflow.required[0]"),
    ({"workflow": {"max_nudges": "2"}}, "hearth.workflow.max_nudges"),
    ({"workflow": {"prerequisites": [{"tool": "search"}]}}, "hearth.workflow.prerequisites[0].after"),
    ({"compaction": "always"}, "hearth.compaction"),
    ({"compaction": {"keep_last": []}}, "hearth.compaction.keep_last"),
    ({"max_tools": 0}, "hearth.max_tools"),
    ({"max_tools": "8"}, "hearth.max_tools"),
    ({"tool_guard": "bare"}, "hearth.tool_guard"),  # the eval's name for off, not a server mode
])
def test_bad_extension_is_a_400_naming_the_field(fake, hearth, param):
    r = post(fake, "hi", tools=[SEARCH, BOOK], hearth=hearth)
    assert r.status_code == 400 and r.json()["error"]["param"] == param
    assert r.json()["error"]["message"].startswith(param)


def test_workflow_needs_tools_and_one_choice(fake):
    r = post(fake, "hi", hearth={"workflow": {}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "hearth.workflow"
    r = post(fake, "hi", tools=[SEARCH], n=2, hearth={"workflow": {}})
    assert r.status_code == 400 and "n = 1" in r.json()["error"]["message"]


# the Anthropic Messages API

A_SEARCH, A_BOOK = ({"name": t["function"]["name"], "description": t["function"]["description"],
                     "input_schema": t["function"]["parameters"]} for t in (SEARCH, BOOK))


def a_post(fake, text: str, **body):
    return fake.client.post("/v1/messages", json={"max_tokens": 64, "messages": [{"role": "user", "content": text}], **body})


def test_anthropic_rescue_and_workflow(fake):
    body = a_post(fake, "script:prose_call", tools=[{**A_SEARCH, "name": "get_weather"}]).json()
    assert [b["type"] for b in body["content"]] == ["text", "tool_use"] and body["stop_reason"] == "tool_use"
    assert kinds(body) == ["rescued"]
    body = a_post(fake, "script:premature", tools=[A_SEARCH, A_BOOK], hearth={"workflow": FLOW}).json()
    assert [b.get("name") for b in body["content"]] == ["search"]
    assert [r["reason"] for r in nudges(body)] == ["premature_answer"]
    assert body["usage"]["input_tokens"] == sum(len(a.prompt) for a in fake.engine.added[-2:])


def test_anthropic_stream_reports_a_rescue(fake):
    r = a_post(fake, "script:prose_call", stream=True, tools=[{**A_SEARCH, "name": "get_weather"}])
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
    (end,) = [e for e in events if e["type"] == "message_delta"]
    assert end["delta"]["stop_reason"] == "tool_use" and kinds(end) == ["rescued"]


def test_anthropic_sdk_reads_a_reviewed_stream(fake):
    with fake.anthropic.messages.stream(model="fake-model", max_tokens=64, tools=[A_SEARCH, A_BOOK],
                                        messages=[{"role": "user", "content": "script:premature"}],
                                        extra_body={"hearth": {"workflow": FLOW}}) as s:
        final = s.get_final_message()
    assert [b.type for b in final.content] == ["tool_use"] and final.content[0].input == {"city": "Paris"}
    assert final.stop_reason == "tool_use"


def test_anthropic_bad_extension_is_an_anthropic_400(fake):
    r = a_post(fake, "hi", tools=[A_SEARCH], hearth={"workflow": {"terminal": "search"}})
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert r.json()["error"]["message"].startswith("hearth.workflow.terminal:")


# the Responses API

R_TOOLS = [{"type": "function", "name": t["function"]["name"], "parameters": t["function"]["parameters"]}
           for t in (SEARCH, BOOK)]


def test_responses_workflow_whole_stored_and_streamed(fake):
    body = fake.client.post("/v1/responses", json={"input": "script:premature", "tools": R_TOOLS,
                                                    "hearth": {"workflow": FLOW}}).json()
    assert [i["name"] for i in body["output"] if i["type"] == "function_call"] == ["search"]
    assert [r["reason"] for r in nudges(body)] == ["premature_answer"]
    assert body["usage"]["input_tokens"] == sum(len(a.prompt) for a in fake.engine.added[-2:])
    assert fake.client.get(f"/v1/responses/{body['id']}").json()["output"] == body["output"]
    r = fake.client.post("/v1/responses", json={"input": "script:premature", "tools": R_TOOLS, "stream": True,
                                                 "hearth": {"workflow": FLOW}})
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [i["name"] for i in done] == ["search"] and done == events[-1]["response"]["output"]


def test_responses_rescue_and_bad_field(fake):
    tools = [{"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}]
    body = fake.client.post("/v1/responses", json={"input": "script:prose_call", "tools": tools}).json()
    assert [i["type"] for i in body["output"]] == ["message", "function_call"] and kinds(body) == ["rescued"]
    r = fake.client.post("/v1/responses", json={"input": "hi", "tools": tools, "hearth": {"compaction": 1}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "hearth.compaction"


@pytest.mark.parametrize("mode", ["off", "grammar"])
def test_outside_guard_mode_only_the_opt_ins_act(make_fake, mode):
    fake = roomy(make_fake)
    body = post(fake, "script:prose_call", tools=[WEATHER], hearth={"tool_guard": mode}).json()
    assert body["choices"][0]["message"]["content"].startswith("Sure! {{") and kinds(body) == []
    assert ("hearth" in body) == (mode == "grammar")  # off: no guard ran, nothing to report
    post(fake, "weather in Oslo", tools=MANY, hearth={"tool_guard": mode})
    assert all(f'"{t["function"]["name"]}"' in fake.engine.added[-1].prompt for t in MANY)  # no default cap
    body = post(fake, "weather in Oslo", tools=MANY, hearth={"tool_guard": mode, "max_tools": 2}).json()
    assert len(body["hearth"]["events"][0]["shown"]) == 2  # asked for: done in every mode
    body = post(fake, "script:premature", tools=[SEARCH, BOOK], hearth={"tool_guard": mode, "workflow": FLOW}).json()
    assert [r["reason"] for r in nudges(body)] == ["premature_answer"] and body["hearth"]["tool_guard"] == mode
