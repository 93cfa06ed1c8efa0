"""hearth.tool_guard.repeats: which calls of a conversation's last step an answer repeats where that
is useless (an error result, or a loop over the same result), and which it may repeat (polling)."""

from __future__ import annotations

import json

from hearth.api.anthropic_messages import anthropic_messages
from hearth.tool_guard.repeats import REPEATED_CALL, RESULT_CHARS, PastCall, last_step, repeated, tool_error
from hearth.tool_parsers.types import ToolCall


def step(name: str, args: dict, call_id: str = "c1") -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}]}


def result(content: str, call_id: str = "c1") -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


USER = {"role": "user", "content": "which python file is here?"}


def test_the_last_step_is_the_calls_whose_results_end_the_conversation():
    msgs = [USER, step("ls", {"a": True}), result('{"files": ["deploy.py"]}')]
    assert last_step(msgs) == [PastCall("ls", {"a": True}, '{"files": ["deploy.py"]}')]
    # arguments as the wire's JSON string read the same
    msgs[1]["tool_calls"][0]["function"]["arguments"] = '{"a": true}'
    assert last_step(msgs)[0].arguments == {"a": True}
    # two calls in one step, each with its own result
    two = {"role": "assistant", "content": "", "tool_calls": [*step("ls", {})["tool_calls"],
                                                             *step("pwd", {}, "c2")["tool_calls"]]}
    assert [(p.name, p.result) for p in last_step([USER, two, result("x"), result("here", "c2")])] == \
        [("ls", "x"), ("pwd", "here")]


def test_no_last_step_after_a_user_turn_or_a_text_answer_or_without_calls():
    assert last_step([USER]) == []
    assert last_step([USER, step("ls", {}), result("x"), {"role": "user", "content": "again"}]) == []
    assert last_step([USER, step("ls", {}), result("x"), {"role": "assistant", "content": "deploy.py"}]) == []
    assert last_step([USER, step("ls", {})]) == []  # a call whose result has not come: the client's turn
    assert last_step([]) == []


def test_a_call_repeats_only_with_the_same_tool_and_arguments():
    past = last_step([USER, step("mv", {"source": "a", "destination": "b"}), result('{"error": "no such file"}')])
    same = ToolCall("x", "mv", json.dumps({"destination": "b", "source": "a"}))  # key order does not matter
    problem = repeated([same], past)
    assert problem is not None and problem.kind == REPEATED_CALL and problem.call is same
    assert "mv was just called with these same arguments and failed" in problem.message
    assert "no such file" in problem.message
    assert repeated([ToolCall("x", "mv", '{"source": "a", "destination": "c"}')], past) is None
    assert repeated([ToolCall("x", "cp", '{"source": "a", "destination": "b"}')], past) is None
    assert repeated([], past) is None
    # the first repeating call of several is the one at fault
    other = ToolCall("y", "cd", '{"folder": "a"}')
    assert repeated([other, same], past).call is same


def test_a_long_result_is_quoted_short():
    past = [PastCall("cat", {}, "x" * (RESULT_CHARS + 50), error=True)]
    message = repeated([ToolCall("x", "cat", "{}")], past).message
    assert "x" * RESULT_CHARS + " ..." in message and "x" * (RESULT_CHARS + 1) not in message


def test_unreadable_arguments_repeat_only_as_the_same_text():
    past = last_step([USER, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "run", "arguments": "not json"}}]}, result("Error: bad input")])
    assert repeated([ToolCall("x", "run", "not json")], past) is not None
    assert repeated([ToolCall("x", "run", "{}")], past) is None


def poll(*results: str, call: tuple[str, dict] = ("get_job_status", {"id": "j1"})) -> list[dict]:
    """A conversation that made `call` once per result, in a row, each answered by that result."""
    msgs = [{"role": "user", "content": "run the job and tell me when it is done"}]
    for i, r in enumerate(results):
        msgs += [step(*call, f"c{i}"), result(r, f"c{i}")]
    return msgs


STATUS = ToolCall("x", "get_job_status", '{"id": "j1"}')


def test_polling_is_not_a_repeat():
    """A call whose result may change is made again legitimately: after one "pending", or after a
    result that differs from the one before it."""
    assert repeated([STATUS], last_step(poll('{"status": "pending"}'))) is None
    assert repeated([STATUS], last_step(poll("pending"))) is None
    assert repeated([STATUS], last_step(poll('{"status": "queued"}', '{"status": "running", "progress": 0.4}'))) is None
    assert repeated([STATUS], last_step(poll("pending", "running", "pending"))) is None


def test_a_call_after_its_error_is_a_repeat():
    for error in ('{"error": "job j1 not found"}', "Error: job j1 not found", 'KeyError: "j1"',
                  '{"status": "failed", "reason": "no such job"}', '{"success": false}'):
        problem = repeated([STATUS], last_step(poll(error)))
        assert problem is not None and problem.kind == REPEATED_CALL and "failed" in problem.message, error
    # an error result of an earlier step, followed by a good one, does not count
    assert repeated([STATUS], last_step(poll('{"error": "busy"}', '{"status": "pending"}'))) is None


def test_the_same_result_twice_in_a_row_is_a_loop():
    past = last_step(poll('{"files": ["a.py"]}', '{"files": ["a.py"]}'))
    assert past[0].same == 2 and not past[0].error
    problem = repeated([STATUS], past)
    assert problem is not None and "2 times in a row" in problem.message and "a.py" in problem.message
    # a new user turn in between breaks the run
    broken = poll('{"files": ["a.py"]}') + [{"role": "user", "content": "again"}] + poll('{"files": ["a.py"]}')[1:]
    assert last_step(broken)[0].same == 1 and repeated([STATUS], last_step(broken)) is None
    # as does another call in between
    other = poll('{"files": ["a.py"]}') + [step("cd", {"folder": "b"}, "c9"), result("ok", "c9")] + poll('{"files": ["a.py"]}')[1:]
    assert repeated([STATUS], last_step(other)) is None


def test_the_client_marks_a_result_as_an_error():
    """Anthropic's tool_result is_error: the text need not read as an error."""
    msgs = anthropic_messages([
        {"role": "user", "content": "status of j1?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_job_status", "input": {"id": "j1"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "no such job", "is_error": True}]}])
    (past,) = last_step(msgs)
    assert past.error and past.result == "Error: no such job" and repeated([STATUS], [past]) is not None
    msgs[-1].update(content="no such job")  # the flag alone, without the text's mark, is enough
    assert last_step(msgs)[0].error and repeated([STATUS], last_step(msgs)) is not None
    msgs[-1].pop("is_error")
    assert repeated([STATUS], last_step(msgs)) is None


def test_what_reads_as_an_error():
    errors = ['{"error": "no such file"}', '{"errors": ["x"]}', "Error: boom", "ERROR - x", "Error 404", "ValueError: bad",
              "Traceback (most recent call last):\n  ...", '{"status": "Failed"}', '{"ok": false}', '"Error: quoted"']
    fine = ['{"error": null, "rows": 3}', '{"status": "pending"}', "pending", "The error was fixed", "",
            "Error handling is documented in README", '{"success": 0}', "[]", None]
    assert [e for e in errors if not tool_error(e)] == [] and [f for f in fine if tool_error(f)] == []
