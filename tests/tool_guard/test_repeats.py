"""hearth.tool_guard.repeats: which calls of a conversation's last step an answer repeats."""

from __future__ import annotations

import json

from hearth.tool_guard.repeats import REPEATED_CALL, RESULT_CHARS, PastCall, last_step, repeated
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
    assert "mv was just called with these same arguments" in problem.message and "no such file" in problem.message
    assert repeated([ToolCall("x", "mv", '{"source": "a", "destination": "c"}')], past) is None
    assert repeated([ToolCall("x", "cp", '{"source": "a", "destination": "b"}')], past) is None
    assert repeated([], past) is None
    # the first repeating call of several is the one at fault
    other = ToolCall("y", "cd", '{"folder": "a"}')
    assert repeated([other, same], past).call is same


def test_a_long_result_is_quoted_short():
    past = [PastCall("cat", {}, "x" * (RESULT_CHARS + 50))]
    message = repeated([ToolCall("x", "cat", "{}")], past).message
    assert "x" * RESULT_CHARS + " ..." in message and "x" * (RESULT_CHARS + 1) not in message


def test_unreadable_arguments_repeat_only_as_the_same_text():
    past = last_step([USER, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "run", "arguments": "not json"}}]}, result("ok")])
    assert repeated([ToolCall("x", "run", "not json")], past) is not None
    assert repeated([ToolCall("x", "run", "{}")], past) is None
