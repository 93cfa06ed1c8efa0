"""Streamed answers read by the official SDKs' own stream helpers and accumulators (openai's
chat.completions.stream / responses.stream, anthropic's messages.stream) on the scripted engine
(tests/server/fakes.py): the event grammar each vendor documents, in the harder cases — parallel and
split tool calls, a call after text, reasoning, usage, logprobs, n > 1, max_tokens, an error mid-stream."""

from __future__ import annotations

import json

import anthropic
import openai
import pydantic
import pytest

from hearth.tool_guard import GuardConfig
from hearth.tool_guard.modes import MODES
from tests.server.fakes import SCRIPTS

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}
R_WEATHER = {"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}
A_WEATHER = {"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}


def _user(script: str) -> list[dict]:
    return [{"role": "user", "content": f"script:{script}"}]


# --- chat.completions.stream ----------------------------------------------------------------------

def chat_stream(fake, script: str, **kw):
    """The helper's events (chunks and typed events) and its final completion."""
    with fake.openai.chat.completions.stream(model="fake-model", messages=_user(script), **kw) as s:
        events = list(s)
        return events, s.get_final_completion()


def _chunks(events) -> list:
    return [e.chunk for e in events if e.type == "chunk"]


def test_chat_parallel_calls_id_and_name_once_arguments_by_index(fake):
    events, final = chat_stream(fake, "two_tools", tools=[WEATHER])
    deltas = [(tc.index, tc) for c in _chunks(events) for ch in c.choices for tc in ch.delta.tool_calls or []]
    for index in (0, 1):
        mine = [tc for i, tc in deltas if i == index]
        assert mine[0].id and mine[0].type == "function" and mine[0].function.name == "get_weather"
        assert all(tc.id is None and tc.type is None and tc.function.name is None for tc in mine[1:])
    calls = final.choices[0].message.tool_calls
    assert [json.loads(c.function.arguments) for c in calls] == [{"city": "Paris"}, {"city": "Rome"}]
    assert calls[0].id != calls[1].id and all(c.id.startswith("call_") for c in calls)
    done = [e for e in events if e.type == "tool_calls.function.arguments.done"]
    assert [(e.index, json.loads(e.arguments)) for e in done] == [(0, {"city": "Paris"}), (1, {"city": "Rome"})]
    assert final.choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("script,content", [("two_tools", None), ("think_tool", None), ("hello", "Hello there!")])
def test_chat_role_delta_s_content_is_null_before_a_tool_call(fake, script, content):
    """OpenAI's first delta of a tool-call answer says `"content": null` (of a text answer ""): the helper's
    final message then has the non-streamed answer's content, None, not "" (and no content.delta of "")."""
    events, final = chat_stream(fake, script, tools=[WEATHER])
    first = _chunks(events)[0].choices[0].delta
    assert first.role == "assistant" and first.content == ("" if content else None)
    assert final.choices[0].message.content == content
    whole = fake.openai.chat.completions.create(model="fake-model", messages=_user(script), tools=[WEATHER])
    assert whole.choices[0].message.content == content
    assert content or not [e for e in events if e.type == "content.delta"]


def test_chat_call_arguments_split_across_chunks(fake):
    events, final = chat_stream(fake, "tool_pieces", tools=[WEATHER])
    pieces = [e.arguments_delta for e in events if e.type == "tool_calls.function.arguments.delta" and e.arguments_delta]
    assert len(pieces) > 1 and json.loads("".join(pieces)) == {"city": "Paris", "days": 3}
    (call,) = final.choices[0].message.tool_calls
    assert json.loads(call.function.arguments) == {"city": "Paris", "days": 3}


def test_chat_call_after_text_ends_the_content_first(fake):
    events, final = chat_stream(fake, "tool", tools=[WEATHER])
    kinds = [e.type for e in events if e.type != "chunk"]
    assert kinds.index("content.done") < kinds.index("tool_calls.function.arguments.done")
    assert next(e.content for e in events if e.type == "content.done") == "Let me check."
    message = final.choices[0].message
    assert message.content == "Let me check." and message.tool_calls[0].function.name == "get_weather"


def test_chat_reasoning_content_accumulates_apart_from_content(fake):
    events, final = chat_stream(fake, "think")
    message = final.choices[0].message
    assert message.content == "Hi!" and message.reasoning_content == "The user wants a greeting."
    assert "".join(e.delta for e in events if e.type == "content.delta") == "Hi!"


def test_chat_include_usage_last_chunk_has_no_choices(fake):
    events, final = chat_stream(fake, "hello", stream_options={"include_usage": True})
    chunks = _chunks(events)
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 4
    assert all(c.usage is None for c in chunks[:-1]) and final.usage.completion_tokens == 4
    assert final.usage.total_tokens == final.usage.prompt_tokens + 4


def test_chat_logprobs_stream_and_add_up(fake):
    events, final = chat_stream(fake, "hello", logprobs=True, top_logprobs=2)
    deltas = [t for e in events if e.type == "logprobs.content.delta" for t in e.content]
    content = final.choices[0].logprobs.content
    assert len(deltas) == len(content) == len(SCRIPTS["hello"])
    assert all(len(t.top_logprobs) == 2 for t in content)
    assert [e.type for e in events].count("logprobs.content.done") == 1


def test_chat_n_choices_each_whole(fake):
    events, final = chat_stream(fake, "hello", n=3, stream_options={"include_usage": True})
    assert [c.index for c in final.choices] == [0, 1, 2]
    assert all(c.message.content == "Hello there!" and c.finish_reason == "stop" for c in final.choices)
    assert [e.type for e in events].count("content.done") == 3 and final.usage.completion_tokens == 12


def test_chat_max_tokens_is_finish_reason_length(fake):
    # the helper refuses a cut answer as OpenAI's does (LengthFinishReasonError), holding what came
    with pytest.raises(openai.LengthFinishReasonError) as cut:
        chat_stream(fake, "hello", max_tokens=2)
    (choice,) = cut.value.completion.choices
    assert choice.finish_reason == "length" and choice.message.content == "Hello "


class GetWeather(pydantic.BaseModel):
    city: str
    days: int


class Answer(pydantic.BaseModel):
    answer: str


def test_chat_strict_tool_arguments_parse_as_they_stream(fake):
    tool = openai.pydantic_function_tool(GetWeather, name="get_weather")
    events, final = chat_stream(fake, "tool_pieces", tools=[tool])
    partial = [e.parsed_arguments for e in events if e.type == "tool_calls.function.arguments.delta"]
    assert partial[-1] == {"city": "Paris", "days": 3}
    assert final.choices[0].message.tool_calls[0].function.parsed_arguments == GetWeather(city="Paris", days=3)


def test_chat_response_format_parses_as_it_streams(fake):
    events, final = chat_stream(fake, "json", response_format=Answer)
    assert [e.parsed for e in events if e.type == "content.delta"][-1] == {"answer": "yes"}
    assert final.choices[0].message.parsed == Answer(answer="yes")


def test_chat_error_mid_stream_raises_api_error(fake):
    with pytest.raises(openai.APIError, match="boom"):
        chat_stream(fake, "fail")


# --- responses.stream -----------------------------------------------------------------------------

def responses_stream(fake, script: str, final: bool = True, **kw):
    with fake.openai.responses.stream(model="fake-model", input=f"script:{script}", **kw) as s:
        events = list(s)
        assert [e.sequence_number for e in events] == list(range(len(events)))
        return events, s.get_final_response() if final else None


def _items_well_formed(events) -> None:
    """Each output item is added, filled and done before the next is added (OpenAI's order), and every
    event of an item names its id and output_index."""
    ids: dict[int, str] = {}
    open_index = None
    for e in events:
        if e.type == "response.output_item.added":
            assert open_index is None, f"item {e.output_index} added while {open_index} is open"
            open_index, ids[e.output_index] = e.output_index, e.item.id
            assert e.output_index == len(ids) - 1
        elif e.type == "response.output_item.done":
            assert e.output_index == open_index and e.item.id == ids[e.output_index]
            open_index = None
        elif hasattr(e, "item_id"):
            assert e.output_index == open_index and e.item_id == ids[e.output_index], e.type
    assert open_index is None


def test_responses_text_full_event_sequence(fake):
    events, final = responses_stream(fake, "hello")
    kinds = [e.type for e in events]
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", *["response.output_text.delta"] * 4, "response.output_text.done",
                     "response.content_part.done", "response.output_item.done", "response.completed"]
    _items_well_formed(events)
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    assert events[-2].item.status == "completed" and final.output_text == "Hello there!"
    assert final.id == events[0].response.id and final.output[0].id == events[2].item.id


def test_responses_call_after_text(fake):
    events, final = responses_stream(fake, "tool", tools=[R_WEATHER])
    _items_well_formed(events)
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert json.loads(done.arguments) == {"city": "Paris"}
    pieces = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert pieces == done.arguments
    msg, call = final.output
    assert msg.type == "message" and call.type == "function_call" and call.id == done.item_id
    assert final.status == "completed"


@pytest.mark.parametrize("mode", MODES)
def test_responses_parallel_calls_one_item_at_a_time(make_fake, mode):
    """Under the guard a streamed call's end came once the answer ended: fc 1 was added before fc 0 was done."""
    events, final = responses_stream(make_fake(tool_guard=GuardConfig(mode=mode)), "two_tools", tools=[R_WEATHER])
    _items_well_formed(events)
    calls = [o for o in final.output if o.type == "function_call"]
    assert [json.loads(c.arguments) for c in calls] == [{"city": "Paris"}, {"city": "Rome"}]
    assert calls[0].call_id != calls[1].call_id
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [d.model_dump() for d in done] == [c.model_dump(exclude={"parsed_arguments"}) for c in final.output]


@pytest.mark.parametrize("mode", MODES)
def test_responses_text_after_a_call(make_fake, mode):
    events, final = responses_stream(make_fake(tool_guard=GuardConfig(mode=mode)), "tool_then_text", tools=[R_WEATHER])
    _items_well_formed(events)
    call, msg = final.output
    assert call.type == "function_call" and json.loads(call.arguments) == {"city": "Paris"}
    assert msg.type == "message" and final.output_text == "I asked for the weather."


def test_responses_split_call_arguments(fake):
    events, final = responses_stream(fake, "tool_pieces", tools=[R_WEATHER])
    _items_well_formed(events)
    pieces = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert len(pieces) > 1 and json.loads("".join(pieces)) == {"city": "Paris", "days": 3}
    assert json.loads(final.output[0].arguments) == {"city": "Paris", "days": 3}


def test_responses_reasoning_item_then_message(fake):
    events, final = responses_stream(fake, "think")
    _items_well_formed(events)
    rs, msg = final.output
    assert rs.type == "reasoning" and rs.content[0].text == "The user wants a greeting." and rs.summary == []
    assert msg.type == "message" and final.output_text == "Hi!"


def test_responses_text_format_parses(fake):
    _, final = responses_stream(fake, "json", text_format=Answer)
    assert final.output_parsed == Answer(answer="yes")


def test_responses_stream_resumed_after_a_sequence_number(fake):
    """The SDK resumes a background stream by reading it from response.created and skipping to starting_after."""
    first = fake.openai.responses.create(model="fake-model", input="script:hello", background=True, stream=True)
    rid = next(iter(first)).response.id
    first.close()
    with fake.openai.responses.stream(response_id=rid, starting_after=2) as s:
        events = list(s)
        final = s.get_final_response()
    assert [e.sequence_number for e in events] == list(range(3, 3 + len(events)))
    assert events[-1].type == "response.completed" and final.id == rid and final.output_text == "Hello there!"


def test_responses_max_output_tokens_is_incomplete(fake):
    # the helper's final response needs response.completed; a cut answer ends with response.incomplete
    events, _ = responses_stream(fake, "hello", final=False, max_output_tokens=2)
    _items_well_formed(events)
    last = events[-1]
    assert last.type == "response.incomplete" and last.response.status == "incomplete"
    assert last.response.incomplete_details.reason == "max_output_tokens"
    assert last.response.output[0].status == "incomplete"


def test_responses_error_mid_stream_ends_with_response_failed(fake):
    events, _ = responses_stream(fake, "fail", final=False)
    assert [e.type for e in events[-2:]] == ["error", "response.failed"]
    failed = events[-1].response
    assert failed.status == "failed" and "boom" in failed.error.message and failed.id == events[0].response.id


# --- messages.stream ------------------------------------------------------------------------------

def message_stream(fake, script: str, **kw):
    kw = {"max_tokens": 64, **kw}
    with fake.anthropic.messages.stream(model="fake-model", messages=_user(script), **kw) as s:
        events = list(s)
        return events, s.get_final_message()


def _blocks_well_formed(events) -> None:
    """content_block_start / delta... / stop per block, one block open at a time, indexes from 0."""
    open_index, count = None, 0
    for e in events:
        if e.type == "content_block_start":
            assert open_index is None and e.index == count
            open_index, count = e.index, count + 1
        elif e.type == "content_block_delta":
            assert e.index == open_index
        elif e.type == "content_block_stop":
            assert e.index == open_index
            open_index = None
    assert open_index is None


def test_messages_thinking_block_ends_with_its_signature(fake):
    events, final = message_stream(fake, "think")
    _blocks_well_formed(events)
    thinking = [e.delta.type for e in events if e.type == "content_block_delta" and e.index == 0]
    assert thinking[-1] == "signature_delta" and set(thinking[:-1]) == {"thinking_delta"}
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].thinking == "The user wants a greeting." and final.content[1].text == "Hi!"
    assert isinstance(final.content[0].signature, str)


def test_messages_text_stream_skips_thinking(fake):
    with fake.anthropic.messages.stream(model="fake-model", max_tokens=64, messages=_user("think")) as s:
        assert "".join(s.text_stream) == "Hi!"


def test_messages_parallel_calls(fake):
    events, final = message_stream(fake, "two_tools", tools=[A_WEATHER])
    _blocks_well_formed(events)
    assert [b.input for b in final.content] == [{"city": "Paris"}, {"city": "Rome"}]
    assert final.content[0].id != final.content[1].id and final.stop_reason == "tool_use"


def test_messages_text_after_a_call(fake):
    events, final = message_stream(fake, "tool_then_text", tools=[A_WEATHER])
    _blocks_well_formed(events)
    assert [b.type for b in final.content] == ["tool_use", "text"] and final.content[1].text == "I asked for the weather."
    assert final.content[0].input == {"city": "Paris"} and final.stop_reason == "tool_use"


def test_messages_call_after_text_with_split_input(fake):
    events, final = message_stream(fake, "guard_stream", tools=[A_WEATHER])
    _blocks_well_formed(events)
    text, call = final.content
    assert text.text == "Let me check." and call.input == {"city": "Paris", "days": 3}
    assert sum(e.type == "content_block_delta" and e.delta.type == "input_json_delta" for e in events) > 1


def test_messages_max_tokens_stop_reason(fake):
    events, final = message_stream(fake, "hello", max_tokens=2)
    _blocks_well_formed(events)
    assert final.stop_reason == "max_tokens" and final.content[0].text == "Hello " and final.usage.output_tokens == 2


def test_messages_error_mid_stream_raises_with_anthropic_error_body(fake):
    with pytest.raises(anthropic.APIStatusError) as err:
        message_stream(fake, "fail")
    assert err.value.body["type"] == "error" and "boom" in err.value.body["error"]["message"]
