"""Background responses (`background: true`) on the scripted fake engine, through the official openai SDK:
queued at once, polled to the end, cancelled, failed, and a streamed one resumed after sequence number N."""

from __future__ import annotations

import time

import openai
import pytest


def _poll(fake, rid: str, until=lambda r: r.status not in ("queued", "in_progress"), timeout: float = 10):
    end = time.monotonic() + timeout
    while True:
        r = fake.openai.responses.retrieve(rid)
        if until(r) or time.monotonic() > end:
            return r
        time.sleep(0.01)


def test_answered_at_once_then_polled_to_completion(fake):
    r = fake.openai.responses.create(model="fake-model", input="script:hello", background=True)
    assert r.status == "queued" and r.background is True and r.output == [] and r.usage is None
    done = _poll(fake, r.id)
    assert done.status == "completed" and done.output_text == "Hello there!" and done.usage.output_tokens == 4
    follow = fake.openai.responses.create(model="fake-model", input="script:hello", previous_response_id=r.id)
    assert follow.status == "completed"
    assert "Hello there!" in fake.last.prompt  # the background answer continues the conversation


def test_a_running_response_is_cancelled_and_says_so(fake):
    r = fake.openai.responses.create(model="fake-model", input="Count script:slow", background=True)
    running = _poll(fake, r.id, until=lambda r: r.status == "in_progress")
    assert running.status == "in_progress"
    with pytest.raises(openai.BadRequestError) as e:  # its conversation has no end yet
        fake.openai.responses.create(model="fake-model", input="and?", previous_response_id=r.id)
    assert e.value.body["param"] == "previous_response_id" and "in_progress" in e.value.message
    cancelled = fake.openai.responses.cancel(r.id)
    assert cancelled.status == "cancelled" and fake.engine.aborted[-1] == fake.last.request_id
    assert fake.openai.responses.retrieve(r.id).status == "cancelled"
    assert fake.openai.responses.cancel(r.id).status == "cancelled"  # once ended, answered as it stands


def test_an_engine_failure_is_a_failed_response_with_its_error(fake):
    r = fake.openai.responses.create(model="fake-model", input="script:fail", background=True)
    failed = _poll(fake, r.id)
    assert failed.status == "failed" and "boom" in failed.error.message


def test_deleting_a_running_response_stops_it(fake):
    r = fake.openai.responses.create(model="fake-model", input="script:slow", background=True)
    _poll(fake, r.id, until=lambda r: r.status == "in_progress")
    fake.openai.responses.delete(r.id)
    assert fake.engine.aborted[-1] == fake.last.request_id
    with pytest.raises(openai.NotFoundError):
        fake.openai.responses.retrieve(r.id)


def test_a_streamed_one_is_resumed_after_a_sequence_number(fake):
    events = list(fake.openai.responses.create(model="fake-model", input="script:hello", background=True,
                                               stream=True))
    assert events[-1].type == "response.completed" and events[-1].response.output_text == "Hello there!"
    again = list(fake.openai.responses.retrieve(events[-1].response.id, stream=True, starting_after=3))
    assert [e.sequence_number for e in again] == list(range(4, len(events)))
    assert [e.model_dump() for e in again] == [e.model_dump() for e in events[4:]]


def test_a_dropped_stream_leaves_the_run_going(fake):
    stream = fake.openai.responses.create(model="fake-model", input="script:slow", background=True, stream=True)
    seen = [next(stream) for _ in range(4)]  # created, in_progress, the first item and part
    stream.close()
    rid = seen[0].response.id
    assert fake.openai.responses.retrieve(rid).status == "in_progress"
    resumed = fake.openai.responses.retrieve(rid, stream=True, starting_after=seen[-1].sequence_number)
    first = next(resumed)
    assert first.sequence_number == 4 and first.type == "response.output_text.delta"
    resumed.close()
    assert fake.openai.responses.cancel(rid).status == "cancelled"


def test_bad_background_requests_are_400s_naming_the_field(fake):
    with pytest.raises(openai.BadRequestError) as e:
        fake.openai.responses.create(model="fake-model", input="hi", background=True, store=False)
    assert e.value.body["param"] == "background"
    plain = fake.openai.responses.create(model="fake-model", input="hi")
    with pytest.raises(openai.BadRequestError) as e:
        list(fake.openai.responses.retrieve(plain.id, stream=True))
    assert e.value.body["param"] == "stream" and "background=true" in e.value.message
    r = fake.openai.responses.create(model="fake-model", input="script:hello", background=True, stream=True)
    rid = next(iter(r)).response.id
    r.close()
    bad = fake.client.get(f"/v1/responses/{rid}", params={"stream": "true", "starting_after": "x"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "starting_after"


@pytest.mark.parametrize("stream", [False, True])
def test_a_bug_in_the_run_ends_it_failed_not_in_progress_forever(fake, monkeypatch, stream):
    """Only engine errors were caught: any other exception left the run in_progress, its followers waiting."""
    import hearth.api.responses_routes as routes

    def broken(self, *a, **k):
        raise KeyError("boom")

    monkeypatch.setattr(routes._Reply, "_on_output", broken)
    if stream:
        events = list(fake.openai.responses.create(model="fake-model", input="script:hello", background=True,
                                                   stream=True))  # ends: a follower never waits on a dead run
        rid = events[0].response.id
    else:
        rid = fake.openai.responses.create(model="fake-model", input="script:hello", background=True).id
    failed = _poll(fake, rid)
    assert failed.status == "failed" and "KeyError" in failed.error.message
    assert fake.openai.responses.cancel(rid).status == "failed"


def test_an_ended_run_keeps_no_model_and_a_running_one_is_never_evicted(make_fake):
    fake = make_fake(max_stored_responses=2)
    slow = fake.openai.responses.create(model="fake-model", input="script:slow", background=True)
    done = fake.openai.responses.create(model="fake-model", input="script:hello", background=True)
    _poll(fake, done.id)
    for _ in range(3):  # the store's bound passes: the oldest ended ones go, the running one stays
        fake.openai.responses.create(model="fake-model", input="hi")
    assert fake.openai.responses.cancel(slow.id).status == "cancelled"
    store = fake.client.app.state.responses
    assert store.get(slow.id).run.reply is None  # its record outlives the model it ran on
    assert store.get(done.id) is None and len(store) <= 3


def test_runs_still_going_at_shutdown_end_cancelled(make_fake):
    fake = make_fake()
    rid = fake.openai.responses.create(model="fake-model", input="script:slow", background=True).id
    _poll(fake, rid, until=lambda r: r.status == "in_progress")
    app = fake.client.app
    fake.client.__exit__(None, None, None)
    assert not app.state.background and app.state.responses.get(rid).body["status"] == "cancelled"


@pytest.mark.parametrize("after", ["--1", "²", "-2", "1.5"])
def test_a_bad_starting_after_is_a_400(fake, after):
    r = fake.openai.responses.create(model="fake-model", input="script:hello", background=True, stream=True)
    rid = next(iter(r)).response.id
    r.close()
    bad = fake.client.get(f"/v1/responses/{rid}", params={"stream": "true", "starting_after": after})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "starting_after"


def _rest(stream, timeout: float = 10) -> list:
    """The stream's events to its end, on a thread: a stream that never ends fails the test, not hangs it."""
    import threading

    got, done = [], threading.Event()

    def read():
        try:
            got.extend(stream)
        finally:
            done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(timeout), f"the stream did not end within {timeout} s (got {[e.type for e in got]})"
    return got


def test_a_cancelled_streamed_run_ends_its_stream_with_response_cancelled(fake):
    """A follower of a cancelled streamed run got no terminal event: the stream just stopped (OpenAI's SDK
    helpers then say "Didn't receive a response.completed"), and a resumed one the same."""
    stream = fake.openai.responses.create(model="fake-model", input="script:slow", background=True, stream=True)
    seen = [next(stream) for _ in range(4)]
    rid = seen[0].response.id
    assert fake.openai.responses.cancel(rid).status == "cancelled"
    rest = _rest(stream)
    assert rest and rest[-1].type == "response.cancelled", [e.type for e in rest]
    last = rest[-1].response  # a dict: the SDK has no model for the event (OpenAI sends it as a webhook's too)
    assert last["id"] == rid and last["status"] == "cancelled"
    assert last["output"][0]["content"][0]["text"].startswith("tick")  # what it had said by then
    numbers = [e.sequence_number for e in seen + rest]
    assert numbers == list(range(len(numbers)))
    resumed = _rest(fake.openai.responses.retrieve(rid, stream=True, starting_after=numbers[-2]))
    assert [e.model_dump() for e in resumed] == [rest[-1].model_dump()]  # a reconnect ends the same way
    assert fake.openai.responses.retrieve(rid).status == "cancelled"


def test_a_streamed_run_failed_by_a_bug_ends_with_response_failed(fake, monkeypatch):
    failing = _rest(fake.openai.responses.create(model="fake-model", input="script:fail", background=True,
                                                 stream=True))
    assert [e.type for e in failing[-2:]] == ["error", "response.failed"]  # an engine error's: response.failed once
    assert "boom" in failing[-2].message and "boom" in failing[-1].response.error.message
    assert [e.type for e in failing].count("response.failed") == 1
    import hearth.api.responses_routes as routes

    def broken(self, *a, **k):
        raise KeyError("boom")

    monkeypatch.setattr(routes._Reply, "_on_output", broken)
    events = _rest(fake.openai.responses.create(model="fake-model", input="script:hello", background=True,
                                                stream=True))
    assert events[-1].type == "response.failed" and "KeyError" in events[-1].response.error.message
