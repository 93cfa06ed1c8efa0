"""The Responses API (/v1/responses) on the scripted fake engine, through the official openai SDK:
items in and out, typed stream events, tools, structured output, the store and its bounds, 400s."""

from __future__ import annotations

import json

import openai
import pytest

from hearth.api.responses_store import ResponseStore, StoredResponse
from tests.server.fakes import CHATML_NO_TOOLS

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def _events(stream) -> list:
    events = list(stream)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    return events


def test_text_whole(fake):
    r = fake.openai.responses.create(model="fake-model", input="script:hello", instructions="Be brief.")
    assert r.status == "completed" and r.output_text == "Hello there!"
    (msg,) = r.output
    assert msg.type == "message" and msg.role == "assistant" and msg.content[0].type == "output_text"
    assert r.usage.input_tokens == len(fake.last.prompt) and r.usage.output_tokens == 4
    assert r.usage.total_tokens == r.usage.input_tokens + 4
    assert fake.last.prompt.startswith("<|im_start|>system\nBe brief.")


def test_text_streamed_events(fake):
    events = _events(fake.openai.responses.create(model="fake-model", input="script:hello", stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[2:4] == ["response.output_item.added", "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == "Hello there!" and len(deltas) > 1
    assert events[-1].response.output_text == "Hello there!" and events[-1].response.usage.output_tokens == 4


@pytest.mark.parametrize("stream", [False, True])
def test_function_call_and_its_output(fake, stream):
    kw = dict(model="fake-model", input=[{"role": "user", "content": "Weather in Paris? script:tool"}],
              tools=[WEATHER])
    if stream:
        events = _events(fake.openai.responses.create(**kw, stream=True))
        kinds = [e.type for e in events]
        assert "response.function_call_arguments.delta" in kinds and "response.function_call_arguments.done" in kinds
        r = events[-1].response
        args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
        assert json.loads(args) == {"city": "Paris"}
    else:
        r = fake.openai.responses.create(**kw)
    msg, call = r.output
    assert msg.type == "message" and msg.content[0].text == "Let me check."
    assert call.type == "function_call" and call.name == "get_weather" and call.call_id.startswith("call_")
    assert json.loads(call.arguments) == {"city": "Paris"}
    follow = [*kw["input"], *[o.model_dump() for o in r.output],
              {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}]
    fake.openai.responses.create(model="fake-model", input=follow, tools=[WEATHER])
    prompt = fake.last.prompt
    assert '"name": "get_weather"' in prompt and "<|im_start|>tool\nsunny, 21 C" in prompt


def test_an_output_may_answer_the_previous_response_s_call(fake):
    """A follow-up by previous_response_id sends only the output: its call is in the stored response."""
    r = fake.openai.responses.create(model="fake-model", input="Weather? script:tool", tools=[WEATHER])
    call = r.output[-1]
    assert call.type == "function_call"
    follow = fake.openai.responses.create(model="fake-model", previous_response_id=r.id, tools=[WEATHER], input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}])
    assert follow.status == "completed" and "<|im_start|>tool\nsunny, 21 C" in fake.last.prompt


def test_reasoning_items(fake):
    r = fake.openai.responses.create(model="fake-model", input="script:think")
    rs, msg = r.output
    assert rs.type == "reasoning" and rs.content[0].type == "reasoning_text" and rs.summary == []
    assert rs.content[0].text == "The user wants a greeting."  # the model's own reasoning, as vLLM gives it
    assert msg.content[0].text == "Hi!" and r.usage.output_tokens_details.reasoning_tokens > 0
    events = _events(fake.openai.responses.create(model="fake-model", input="script:think", stream=True))
    text = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    done = next(e for e in events if e.type == "response.output_item.done" and e.item.type == "reasoning")
    assert text == done.item.content[0].text == "The user wants a greeting."
    assert [e.type for e in events if getattr(e, "item_id", None) == done.item.id][:2] == [
        "response.content_part.added", "response.reasoning_text.delta"]
    with fake.openai.responses.stream(model="fake-model", input="script:think") as stream:  # the SDK's accumulator
        final = stream.get_final_response()
    assert final.output[0].content[0].text == "The user wants a greeting." and final.output_text == "Hi!"


def test_structured_output_and_sampling_fields(fake):
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    r = fake.openai.responses.create(model="fake-model", input="script:json", max_output_tokens=9, temperature=0.3,
                                     top_p=0.9, text={"format": {"type": "json_schema", "name": "a", "schema": schema}})
    assert json.loads(r.output_text) == {"answer": "yes"}
    p = fake.last.params
    assert p.structured_output.json_schema == schema and p.max_tokens == 9
    assert p.temperature == 0.3 and p.top_p == 0.9


def test_max_output_tokens_makes_it_incomplete(fake):
    r = fake.openai.responses.create(model="fake-model", input="script:hello", max_output_tokens=2)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    events = _events(fake.openai.responses.create(model="fake-model", input="script:hello", max_output_tokens=2,
                                                  stream=True))
    assert events[-1].type == "response.incomplete"


def test_max_output_tokens_echoes_the_limit_applied(make_fake):
    """With `--max-tokens-limit 7` and no max_output_tokens asked, 7 bounded the answer but the response
    said null; an asked value is echoed as given (as OpenAI echoes it), and with no limit null stays."""
    fake = make_fake(max_tokens=7)
    r = fake.openai.responses.create(model="fake-model", input="script:hello")
    assert fake.last.params.max_tokens == 7 and r.max_output_tokens == 7
    stored = fake.client.get(f"/v1/responses/{r.id}").json()
    assert stored["max_output_tokens"] == 7
    events = _events(fake.openai.responses.create(model="fake-model", input="script:hello", stream=True))
    assert events[0].response.max_output_tokens == 7 and events[-1].response.max_output_tokens == 7
    r = fake.openai.responses.create(model="fake-model", input="script:hello", max_output_tokens=5)
    assert r.max_output_tokens == 5
    r = make_fake().openai.responses.create(model="fake-model", input="script:hello")
    assert r.max_output_tokens is None


def test_previous_response_id_continues_the_stored_prompt(fake):
    first = fake.openai.responses.create(model="fake-model", input="script:hello", instructions="Be brief.")
    p1 = fake.last.prompt
    second = fake.openai.responses.create(model="fake-model", input="And again?", previous_response_id=first.id,
                                          instructions="Be brief.")
    p2 = fake.last.prompt
    # the previous prompt, its output as generated, then the new turn
    assert p2.startswith(p1 + "Hello there!") and p2.endswith("And again?<|im_end|>\n<|im_start|>assistant\n")
    assert second.previous_response_id == first.id
    assert fake.openai.responses.retrieve(first.id).output_text == "Hello there!"
    assert fake.openai.responses.delete(first.id) is None
    with pytest.raises(openai.NotFoundError):
        fake.openai.responses.retrieve(first.id)
    with pytest.raises(openai.BadRequestError) as e:
        fake.openai.responses.create(model="fake-model", input="x", previous_response_id=first.id)
    assert e.value.body["param"] == "previous_response_id" and first.id in e.value.message


def test_input_items_list_the_context_a_response_answered(fake):
    """OpenAI's GET /v1/responses/{id}/input_items: a follow-up's list holds the previous input and
    output too, newest first by default; the SDK pages through it by `after`."""
    first = fake.openai.responses.create(model="fake-model", input="script:hello")
    second = fake.openai.responses.create(model="fake-model", previous_response_id=first.id, input=[
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "And again?"}]}])
    page = fake.openai.responses.input_items.list(second.id)
    newest, answer, oldest = page.data
    assert [i.type for i in page.data] == ["message"] * 3 and not page.has_more
    assert newest.role == "user" and newest.content[0].text == "And again?" and newest.id.startswith("msg_")
    assert answer.id == first.output[0].id and answer.role == "assistant" and answer.content[0].text == "Hello there!"
    assert oldest.role == "user" and oldest.content[0].type == "input_text" and oldest.content[0].text == "script:hello"
    assert [i.id for i in fake.openai.responses.input_items.list(first.id).data] == [oldest.id]
    walked = fake.openai.responses.input_items.list(second.id, order="asc", limit=1)  # one item a page
    assert [i.id for i in walked] == [oldest.id, answer.id, newest.id]
    raw = fake.client.get(f"/v1/responses/{second.id}/input_items", params={"order": "asc", "limit": 2}).json()
    assert raw["object"] == "list" and raw["has_more"] and (raw["first_id"], raw["last_id"]) == (oldest.id, answer.id)


@pytest.mark.parametrize("query, param", [({"limit": 0}, "limit"), ({"limit": 101}, "limit"), ({"limit": "x"}, "limit"),
                                          ({"order": "up"}, "order"), ({"after": "msg_nope"}, "after")])
def test_input_items_bad_query_is_a_400_naming_it(fake, query, param):
    r = fake.openai.responses.create(model="fake-model", input="hi")
    got = fake.client.get(f"/v1/responses/{r.id}/input_items", params=query)
    assert got.status_code == 400 and got.json()["error"]["param"] == param, got.text
    assert fake.client.get("/v1/responses/resp_nope/input_items").status_code == 404


def test_cancel_answers_as_openai_does_for_a_response_not_in_the_background(fake):
    r = fake.openai.responses.create(model="fake-model", input="hi")
    with pytest.raises(openai.BadRequestError) as e:
        fake.openai.responses.cancel(r.id)
    assert "cannot cancel a synchronous response" in e.value.message and "background" in e.value.message
    assert fake.openai.responses.retrieve(r.id).status == "completed"  # nothing changed
    with pytest.raises(openai.NotFoundError):
        fake.openai.responses.cancel("resp_nope")


def test_store_false_keeps_nothing(fake):
    r = fake.openai.responses.create(model="fake-model", input="hi", store=False)
    with pytest.raises(openai.NotFoundError):
        fake.openai.responses.retrieve(r.id)


def test_store_is_bounded_in_count_and_age():
    now = [0.0]
    store = ResponseStore(max_count=2, max_age_s=10, clock=lambda: now[0])
    for name in "abc":
        store.put(name, StoredResponse({}, [], "", []))
    assert store.get("a") is None and store.get("b") is not None and len(store) == 2
    now[0] = 10.5
    store.put("d", StoredResponse({}, [], "", []))
    assert store.get("b") is None and store.get("c") is None and store.get("d") is not None


@pytest.mark.parametrize("body, param, words", [
    ({"input": [{"type": "image_generation_call", "id": "x"}]}, "input[0].type", "image_generation_call"),
    ({"input": [{"role": "user", "content": "hi"}, {"type": "function_call", "name": "f"}]}, "input[1].call_id",
     "required"),
    ({"input": [{"role": "wizard", "content": "hi"}]}, "input[0].role", "wizard"),
    ({"input": [{"role": "user", "content": "hi"}, {"type": "function_call_output", "call_id": "call_nope",
                                                     "output": "x"}]}, "input[1].call_id", "call_nope"),
    ({"input": "hi", "previous_response_id": "resp_nope"}, "previous_response_id", "resp_nope"),
    ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0].type", "web_search"),
    ({"input": "hi", "tools": [{"type": "function", "name": ""}]}, "tools[0].name", "required"),
    ({"input": "hi", "tools": [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {
        "d": {"type": "dict"}}}}]}, "tools[0].parameters", "not a valid JSON schema"),  # Responses' shape
    ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "a"}}}, "text.format.schema", "required"),
    ({"input": "hi", "max_output_tokens": 10**7}, "max_output_tokens", "at most"),
    ({}, "input", "required"),
])
def test_bad_input_is_a_400_naming_it(fake, body, param, words):
    r = fake.client.post("/v1/responses", json={"model": "fake-model", **body})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and words in err["message"] and err["type"] == "invalid_request_error"


@pytest.mark.parametrize("arguments, kind", [({"city": "Oslo"}, "an object"), (5, "a number"), (None, "null"),
                                             (["x"], "a list")])
def test_a_function_call_item_with_arguments_not_a_string_is_a_400(fake, arguments, kind):
    """They were str()-ed (or an object taken as given); OpenAI answers 400 `Invalid type for
    'input[0].arguments': expected a string`. The wording is the chat route's for its history calls."""
    item = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": arguments}
    r = fake.client.post("/v1/responses", json={"model": "fake-model", "input": [item]})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "input[0].arguments" and err["type"] == "invalid_request_error"
    assert err["message"] == f"input[0].arguments: must be a string of JSON, not {kind}"


def test_a_function_call_item_without_arguments_is_a_400(fake):
    item = {"type": "function_call", "call_id": "c1", "name": "f"}
    r = fake.client.post("/v1/responses", json={"model": "fake-model", "input": [item]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input[0].arguments", r.text


def test_a_function_call_item_with_string_arguments_is_rendered(fake):
    items = [{"role": "user", "content": "hi"},
             {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"city": "Oslo"}'},
             {"type": "function_call_output", "call_id": "c1", "output": "ok"}]
    assert fake.client.post("/v1/responses", json={"model": "fake-model", "input": items}).status_code == 200
    assert '"city": "Oslo"' in fake.last.prompt


def test_nulls_mean_not_given(fake):
    body = {"model": "fake-model", "input": "script:hello", "instructions": None, "tools": None, "tool_choice": None,
            "text": None, "max_output_tokens": None, "temperature": None, "top_p": None, "reasoning": None,
            "store": None, "previous_response_id": None, "stream": None, "parallel_tool_calls": None,
            "metadata": None, "user": None}
    r = fake.client.post("/v1/responses", json=body)
    assert r.status_code == 200 and r.json()["output"][0]["content"][0]["text"] == "Hello there!"


def test_error_mid_stream_is_an_error_event_then_response_failed(fake):
    events = _events(fake.openai.responses.create(model="fake-model", input="script:fail", stream=True))
    assert events[-2].type == "error" and "boom" in events[-2].message
    assert events[-1].type == "response.failed" and "boom" in events[-1].response.error.message


def test_a_failed_stream_is_stored_failed_with_its_error(fake):
    """A streamed response that failed was not stored (a GET of its id: 404); OpenAI keeps it, failed."""
    events = _events(fake.openai.responses.create(model="fake-model", input="script:fail", stream=True))
    failed = events[-1].response
    got = fake.openai.responses.retrieve(failed.id)
    assert got.status == "failed" and got.error.code == failed.error.code and "boom" in got.error.message
    assert got.model_dump() == failed.model_dump()
    gone = _events(fake.openai.responses.create(model="fake-model", input="script:fail", stream=True, store=False))
    with pytest.raises(openai.NotFoundError):
        fake.openai.responses.retrieve(gone[-1].response.id)


def test_template_without_tools_gets_them_in_the_system_prompt(make_fake):
    f = make_fake(CHATML_NO_TOOLS)
    r = f.openai.responses.create(model="fake-model", input="Weather? script:tool", tools=[WEATHER],
                                  tool_choice="auto")
    assert r.output[-1].type == "function_call" and "get_weather" in f.last.prompt


def test_function_call_arguments_stream_as_written(fake):
    # the parse-only server (tool guard off): the guard sends a call once it validated
    events = _events(fake.openai.responses.create(model="fake-model", input="script:tool_pieces", tools=[WEATHER],
                                                  stream=True, extra_body={"hearth": {"tool_guard": "off"}}))
    added = next(e for e in events if e.type == "response.output_item.added")
    assert added.item.type == "function_call" and added.item.name == "get_weather" and added.item.call_id
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert len(deltas) >= 3 and "".join(deltas) == done.arguments
    assert json.loads(done.arguments) == {"city": "Paris", "days": 3}


def test_guarded_response_retries_and_reports(fake):
    r = fake.client.post("/v1/responses", json={"model": "fake-model", "input": "script:guard_unknown",
                                                "tools": [WEATHER]})
    assert r.status_code == 200, r.text
    body = r.json()
    calls = [i for i in body["output"] if i["type"] == "function_call"]
    assert [c["name"] for c in calls] == ["get_weather"] and body["hearth"]["retries"][0]["kind"] == "resample"
    # a follow-up renders the stored conversation anew (the retried output continues no single prompt)
    follow = fake.client.post("/v1/responses", json={"model": "fake-model", "previous_response_id": body["id"],
                                                     "input": "thanks"})
    assert follow.status_code == 200 and "get_wether" not in fake.last.prompt


def test_a_conversation_is_a_400_not_dropped(fake):
    """`conversation` (OpenAI's server-kept history) was dropped with a 200: the answer lost its history."""
    r = fake.client.post("/v1/responses", json={"model": "fake-model", "input": "hi", "conversation": "conv_1"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "conversation" and "previous_response_id" in err["message"]
