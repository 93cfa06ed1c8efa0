"""The client loop and the multi-turn checks, with a scripted model behind a fake `post` and the
hand-written backend of fake_bfcl in a real child process."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace

import pytest

from hearth.errors import HearthError
from hearth.evals.backends import BackendError, Backends, parse_call
from hearth.evals.bfcl_data import extract_backends, load_category
from hearth.evals.chat_loop import MAX_STEPS, ChatClient
from hearth.evals.tool_eval import Run, run_in_turns, run_item
from tests.evals.fake_bfcl import make_wheel


def call(name, **args):
    return {"id": f"call_{name}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def text(s="Done."):
    return {"role": "assistant", "content": s}


def calls(*cs):
    return {"role": "assistant", "content": None, "tool_calls": list(cs)}


class Scripted:
    """Answers each request with the next message of the script; keeps the request bodies."""

    def __init__(self, *messages, status=200):
        self.messages, self.bodies, self.status = list(messages), [], status

    def __call__(self, body):
        self.bodies.append(json.loads(json.dumps(body)))
        if self.status != 200:
            return self.status, {"error": {"message": "prompt too long"}}
        msg = self.messages.pop(0) if self.messages else text()
        return 200, {"choices": [{"message": msg}], "usage": {"prompt_tokens": 50, "completion_tokens": 7}}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    return make_wheel(tmp_path_factory.mktemp("bfcl") / "bfcl_eval-2026.3.23-py3-none-any.whl")


@pytest.fixture(scope="module")
def backends(wheel, tmp_path_factory):
    b = Backends(extract_backends(wheel, home=tmp_path_factory.mktemp("home")))
    yield b
    b.close()


def multi(wheel):
    return load_category(wheel, "multi_turn_base")[0]


def test_single_turn_scored_on_the_first_response(wheel):
    item = load_category(wheel, "simple_python")[0]
    post = Scripted(calls(call("geo_area", base=3)))
    r = run_item(item, ChatClient(post, "bare"), None)
    assert r.passed, r.reason
    body = post.bodies[0]
    assert body["hearth"] == {"tool_guard": "off"} and body["temperature"] == 0
    assert body["tools"][0]["function"]["name"] == "geo_area"
    row = r.row({"mode": "bare"})
    assert row["result"] == "pass" and row["called"] == 1 and row["valid_calls"] == 1 and row["prompt_tokens"] == [50]


@pytest.mark.parametrize("reply,why", [
    (calls(call("geo_area", base=4)), "not one of"),
    (text("The area is 4.5"), "0 calls"),
    ({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "geo_area", "arguments": "{base: 3"}}]}, "not JSON"),
])
def test_single_turn_failures(wheel, reply, why):
    r = run_item(load_category(wheel, "simple_python")[0], ChatClient(Scripted(reply), "bare"), None)
    assert not r.passed and why in r.reason


def test_validity_counts_text_that_tried_to_call(wheel):
    item = load_category(wheel, "irrelevance")[0]
    r = run_item(item, ChatClient(Scripted(text('{"name": "geo_area", "arguments": {}}')), "bare"), None)
    assert r.passed  # no call was made
    assert r.exchanges[0].called and not r.exchanges[0].valid
    r = run_item(item, ChatClient(Scripted(calls(call("geo_area", base="x"))), "bare"), None)
    assert not r.passed and r.exchanges[0].called and not r.exchanges[0].valid  # base must be an integer


def test_declined_calls_are_counted(wheel):
    """A call the guard declined comes back as text; the row says so (hearth.events)."""
    item = load_category(wheel, "irrelevance")[0]
    reply = {"choices": [{"message": text('```json\n{"name": "geo_area", "arguments": {}}\n```')}],
             "hearth": {"tool_guard": "guard", "events": [{"kind": "declined", "name": "geo_area", "name_prob": 0.001}]}}
    r = run_item(item, ChatClient(lambda body: (200, reply), "guard"), None)
    assert r.passed and r.row({})["declined"] == 1 and r.row({})["name_prob"] == [0.001]
    r = run_item(item, ChatClient(Scripted(text("No tool fits.")), "bare"), None)
    assert r.row({})["declined"] == 0 and r.row({})["name_prob"] == [None]


def test_the_decline_floor_travels_with_each_request_and_kept_calls_report_what_it_read(wheel):
    item = load_category(wheel, "irrelevance")[0]
    sent = []
    reply = {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "geo_area", "arguments": "{}"}}]}}],
             "hearth": {"tool_guard": "guard", "calls": [{"id": "c1", "name": "geo_area", "confidence": 0.9,
                                                          "name_prob": 0.004}]}}
    r = run_item(item, ChatClient(lambda body: (sent.append(body), (200, reply))[1], "guard", decline_below=0.0), None)
    assert sent[0]["hearth"] == {"tool_guard": "guard", "tool_guard_decline_below": 0.0}
    assert not r.passed and r.row({})["name_prob"] == [0.004] and r.row({})["declined"] == 0


def test_the_parallel_hint_switch_travels_with_each_request(wheel):
    """--parallel-hint on|off: hearth.tool_guard_parallel_hint in every request; unset, the server decides."""
    item = load_category(wheel, "simple_python")[0]
    reply = {"choices": [{"message": {"role": "assistant", "content": "No."}}], "hearth": {"tool_guard": "guard"}}
    for hint, want in ((False, {"tool_guard_parallel_hint": False}), (True, {"tool_guard_parallel_hint": True}), (None, {})):
        sent = []
        run_item(item, ChatClient(lambda body: (sent.append(body), (200, reply))[1], "guard", parallel_hint=hint), None)
        assert sent[0]["hearth"] == {"tool_guard": "guard", **want}


def test_server_errors_fail_the_item(wheel):
    r = run_item(load_category(wheel, "simple_python")[0], ChatClient(Scripted(status=400), "bare"), None)
    assert not r.passed and r.reason == "HTTP 400: prompt too long"


def test_modes_travel_as_hearth_tool_guard():
    for mode, sent in (("bare", "off"), ("grammar", "grammar"), ("guard", "guard")):
        post = Scripted(text("hi"))
        ChatClient(post, mode).chat([{"role": "user", "content": "hi"}], SimpleNamespace(tools=[]))
        assert post.bodies[-1]["hearth"] == {"tool_guard": sent}
    with pytest.raises(HearthError, match="unknown"):
        ChatClient(Scripted(), "strict")


def test_multi_turn_passes_with_the_ground_truths_calls(wheel, backends):
    post = Scripted(calls(call("create_ticket", title="disk full")), text(),
                    calls(call("get_ticket", ticket_id="0")), text("It is open."))
    r = run_item(multi(wheel), ChatClient(post, "bare"), backends)
    assert r.passed, r.reason
    assert len(r.exchanges) == 4
    last = post.bodies[-1]["messages"]  # the whole conversation goes back each time, results included
    assert [m["role"] for m in last] == ["user", "assistant", "tool", "assistant", "user", "assistant", "tool"]
    assert json.loads(last[2]["content"]) == {"id": "0"} and last[2]["tool_call_id"] == "call_create_ticket"
    assert json.loads(last[-1]["content"]) == {"title": "disk full", "priority": 1}


@pytest.mark.parametrize("script,why", [
    # a different title: the backends' states differ after turn 0
    ([calls(call("create_ticket", title="disk empty")), text()], "turn 0: state differs: TicketAPI.tickets"),
    # an extra argument changes the state too
    ([calls(call("create_ticket", title="disk full", priority=3)), text()], "turn 0: state differs"),
    # turn 1 answered from memory: no call where the ground truth makes one
    ([calls(call("create_ticket", title="disk full")), text(), text("It is open.")], "turn 1: no call"),
    # same state, but the ground truth's result (the ticket) is not among the model's results
    ([calls(call("create_ticket", title="disk full")), text(), calls(call("get_ticket", ticket_id="7")), text()],
     "turn 1: results missing"),
    ([calls(call("create_ticket", title="disk full"))] * MAX_STEPS, f"turn 0: still calling after {MAX_STEPS}"),
])
def test_multi_turn_failures(wheel, backends, script, why):
    r = run_item(multi(wheel), ChatClient(Scripted(*script), "bare"), backends)
    assert not r.passed and why in r.reason, r.reason


def test_tool_errors_are_fed_back(wheel, backends):
    post = Scripted(calls(call("nope", x=1)), calls(call("get_ticket", ticket_id="9")),
                    {"role": "assistant", "content": None, "tool_calls": [
                        {"id": "bad", "type": "function", "function": {"name": "create_ticket", "arguments": "{"}}]},
                    calls(call("create_ticket", title="disk full")), text())
    run_item(multi(wheel), ChatClient(post, "bare"), backends)
    tools = [m["content"] for m in post.bodies[-1]["messages"] if m["role"] == "tool"]
    assert tools[0] == "Error during execution: name 'nope' is not defined"
    assert tools[1] == "Error during execution: '9'"  # the backend's KeyError
    assert tools[2].startswith("Error: the arguments are not valid JSON")


def test_backend_timeout_and_restart(wheel, tmp_path):
    b = Backends(extract_backends(wheel, home=tmp_path), timeout=1.0)
    try:
        b.load(["TicketAPI"], {})
        with pytest.raises(BackendError, match="did not answer"):
            b.call("model", "wait", kwargs={"seconds": 30})
        b.load(["TicketAPI"], {})  # a fresh child
        assert b.call("model", "wait", kwargs={"seconds": 0}) == "done"
    finally:
        b.close()


def test_parse_ground_truth_calls():
    assert parse_call("sort('a.txt')") == ("sort", ["a.txt"], {})
    assert parse_call("mv(source='a', destination='b', n=[1, 2])") == ("mv", [], {"source": "a", "destination": "b", "n": [1, 2]})
    with pytest.raises(BackendError, match="cannot read"):
        parse_call("os.system('x')")
    with pytest.raises(BackendError, match="cannot read"):
        parse_call("f(x=g())")


def test_rows_record_the_calls_confidence_and_the_routers_decision(wheel):
    item = load_category(wheel, "simple_python")[0]
    router = {"model": "small", "decision": "accepted", "threshold": 0.0, "confidence": 0.42, "latency_s": 0.5}
    ext = {"tool_guard": "guard", "calls": [{"id": "c", "name": "geo_area", "confidence": 0.42}], "router": router}

    def post(body):
        return 200, {"choices": [{"message": calls(call("geo_area", base=3))}], "hearth": ext, "usage": {}}
    # an accepted route reports the small model's guard, whatever mode the client asked for
    row = run_item(item, ChatClient(post, "bare"), None).row({})
    assert row["result"] == "pass" and row["confidence"] == [0.42] and row["router"] == [router]
    plain = run_item(item, ChatClient(Scripted(calls(call("geo_area", base=3))), "bare"), None).row({})
    assert plain["confidence"] == [None] and "router" not in plain


def test_runs_in_turns_alternate_which_goes_first(wheel):
    items = load_category(wheel, "simple_python")[:1] * 3
    order = []

    def post_as(name):
        def post(body):
            order.append((name, body["hearth"].get("router")))
            return 200, {"choices": [{"message": calls(call("geo_area", base=3))}], "usage": {}}
        return post
    routed = Run(ChatClient(post_as("routed"), "guard"), {"m": 1})
    alone = Run(ChatClient(post_as("alone"), "guard"), {})
    alone.client.extensions["router"] = False
    run_in_turns(items, [routed, alone], None)
    assert order == [("routed", None), ("alone", False), ("alone", False), ("routed", None), ("routed", None),
                     ("alone", False)]
    assert [r["m"] for r in routed.rows] == [1, 1, 1] and len(alone.rows) == 3 and "m" not in alone.rows[0]


def test_concurrent_items_are_asked_at_once_multi_turn_ones_one_at_a_time(wheel, backends):
    """--concurrency: the two single-turn items meet at a barrier (each waits for the other's request:
    asked one at a time they would break it); the multi-turn items share the backends, so one
    conversation ends before the next starts; the rows come in item order."""
    simple = load_category(wheel, "simple_python")
    items = [*simple, multi(wheel), multi(wheel), *load_category(wheel, "irrelevance")]
    meet, lock, multi_threads = threading.Barrier(2, timeout=30), threading.Lock(), []
    script = [calls(call("create_ticket", title="disk full")), text(),
              calls(call("get_ticket", ticket_id="0")), text("It is open.")]

    def post(body):
        first = body["messages"][0]["content"]
        if first.startswith("Area for base"):
            meet.wait()
            return 200, {"choices": [{"message": calls(call("geo_area", base=int(first[-2])))}], "usage": {}}
        if first.startswith("Open a ticket"):
            with lock:
                multi_threads.append(threading.get_ident())
            return 200, {"choices": [{"message": script[sum(m["role"] == "assistant" for m in body["messages"])]}],
                         "usage": {}}
        return 200, {"choices": [{"message": text()}], "usage": {}}
    run = Run(ChatClient(post, "bare"), {})
    run_in_turns(items, [run], backends, concurrency=3)
    assert [r["id"] for r in run.rows] == [i.id for i in items]
    assert all(r["result"] == "pass" for r in run.rows), run.rows
    switches = sum(a != b for a, b in zip(multi_threads, multi_threads[1:]))
    assert len(multi_threads) == 8 and switches <= 1, multi_threads  # two whole conversations, never interleaved
