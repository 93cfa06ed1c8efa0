"""Responses' `truncation` and `include: ["message.output_text.logprobs"]` (hearth.api.responses_options),
on the scripted fake engine through the official openai SDK (one token per scripted piece)."""

from __future__ import annotations

import openai
import pytest

from hearth.api.responses_options import truncate_oldest
from tests.server.fakes import FakeEngine
from tests.server.test_responses import WEATHER, _events

LOGPROBS = ["message.output_text.logprobs"]
# the fake tokenizer: a token a character; the context 260, the answer's room 32 (an eighth)
LONG = [{"role": "user", "content": "a" * 120}, {"role": "assistant", "content": "b" * 10},
        {"role": "user", "content": "c" * 20}, {"role": "assistant", "content": "d" * 10},
        {"role": "user", "content": "script:hello"}]


@pytest.fixture
def small(make_fake):
    return make_fake(engine=FakeEngine(max_model_len=260))


def test_truncation_disabled_is_openai_s_400(small):
    with pytest.raises(openai.BadRequestError) as e:
        small.openai.responses.create(model="fake-model", input=LONG)
    err = e.value.body
    assert (err["code"], err["param"], err["type"]) == ("context_length_exceeded", "input", "invalid_request_error")
    assert err["message"].startswith("prompt is ") and "the context holds 260" in err["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_truncation_auto_drops_the_oldest_turns_only(small, stream):
    kw = dict(model="fake-model", input=LONG, instructions="Be brief.", truncation="auto")
    r = _events(small.openai.responses.create(**kw, stream=True))[-1].response if stream else \
        small.openai.responses.create(**kw)
    assert r.status == "completed" and r.output_text == "Hello there!" and r.truncation == "auto"
    prompt = small.last.prompt
    # the first turn (its user message and answer) dropped, the rest kept whole, instructions first
    assert "a" * 10 not in prompt and "b" * 10 not in prompt and "c" * 20 in prompt and "d" * 10 in prompt
    assert prompt.startswith("<|im_start|>system\nBe brief.") and len(prompt) + 32 <= 260
    assert small.openai.responses.create(model="fake-model", input="script:hello").truncation == "disabled"


def test_truncate_oldest_cuts_before_user_turns_and_keeps_the_system_prompt():
    convo = [{"role": "system", "content": "s"}, {"role": "user", "content": "u1"},
             {"role": "assistant", "content": "", "tool_calls": [{"id": "1"}]}, {"role": "tool", "content": "t"},
             {"role": "user", "content": "u2"}, {"role": "assistant", "content": "x"}, {"role": "user", "content": "u3"}]
    count = len  # one token a message
    assert truncate_oldest(count, convo, 7) is convo
    assert truncate_oldest(count, convo, 6) == [convo[0], *convo[4:]]  # never between a call and its result
    assert truncate_oldest(count, convo, 4) == [convo[0], *convo[4:]]
    assert truncate_oldest(count, convo, 2) == [convo[0], convo[6]]
    assert truncate_oldest(count, convo, 1) == [convo[0], convo[6]]  # the shortest: the 400 says by how much


def test_a_bad_truncation_or_include_is_a_400_naming_it(fake):
    for kw, param in [({"truncation": "sometimes"}, "truncation"), ({"include": ["message.logprobs"]}, "include[0]"),
                      ({"include": LOGPROBS, "top_logprobs": -2}, "top_logprobs")]:
        with pytest.raises(openai.BadRequestError) as e:
            fake.openai.responses.create(model="fake-model", input="script:hello", **kw)
        assert e.value.body["param"] == param, kw
    # another of OpenAI's values (Codex sends this one with store=false): nothing to add, no error
    r = fake.openai.responses.create(model="fake-model", input="script:hello", include=["reasoning.encrypted_content"])
    assert r.output[0].content[0].logprobs == []


def test_output_text_logprobs_whole(fake):
    r = fake.openai.responses.create(model="fake-model", input="script:hello", include=LOGPROBS, top_logprobs=2)
    part = r.output[0].content[0]
    assert [lp.token for lp in part.logprobs] == ["H", "l", "t", "!"]  # a piece a token, named by its first char
    first = part.logprobs[0]
    assert first.logprob == -0.5 and first.bytes == [72]
    assert [(t.token, t.logprob) for t in first.top_logprobs] == [("H", -0.5), ("A", -1.0)]
    assert fake.last.params.logprobs == 2
    plain = fake.openai.responses.create(model="fake-model", input="script:hello", top_logprobs=2)
    assert plain.output[0].content[0].logprobs == [] and fake.last.params.logprobs is None  # as OpenAI: include asks


def test_output_text_logprobs_streamed(fake):
    events = _events(fake.openai.responses.create(model="fake-model", input="script:hello", include=LOGPROBS,
                                                  top_logprobs=1, stream=True))
    deltas = [lp.token for e in events if e.type == "response.output_text.delta" for lp in e.logprobs]
    done = next(e for e in events if e.type == "response.output_text.done")
    final = events[-1].response.output[0].content[0].logprobs
    assert deltas == [lp.token for lp in done.logprobs] == [lp.token for lp in final] == ["H", "l", "t", "!"]
    assert all(len(lp.top_logprobs) == 1 for lp in final)


@pytest.mark.parametrize("stream", [False, True])
def test_logprobs_are_the_message_text_s_not_a_tool_call_s(fake, stream):
    kw = dict(model="fake-model", input="Weather in Paris? script:tool", tools=[WEATHER], include=LOGPROBS)
    r = _events(fake.openai.responses.create(**kw, stream=True))[-1].response if stream else \
        fake.openai.responses.create(**kw)
    msg, call = r.output
    assert call.type == "function_call" and [lp.token for lp in msg.content[0].logprobs] == ["L"]
