"""hearth.workflow on scripted conversations: progress comes from the structured tool calls of the
history (not its prose), and each rule judges an output: premature answers, prerequisites with
matching arguments, terminal tools, loops; and the nudge messages that carry the verdict back."""

from __future__ import annotations

import json

import pytest

from hearth.tool_guard.nudge import nudge_messages
from hearth.tool_guard.request_fields import FieldError
from hearth.tool_guard.workflow import Prerequisite, Workflow, parse_workflow, progress, review
from hearth.tool_parsers import ToolCall

TOOLS = ["search", "book", "pay", "submit"]
FLOW = Workflow(required=("search", "book"), prerequisites=(Prerequisite("book", "search", ("city",)),
                                                           Prerequisite("pay", "book")),
                terminal=("submit",), max_repeats=2)


def turn(*calls: tuple[str, dict]) -> list[dict]:
    """An assistant turn with these calls, and their results."""
    tcs = [{"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": a}} for i, (n, a) in enumerate(calls)]
    return [{"role": "assistant", "content": "", "tool_calls": tcs}] + [
        {"role": "tool", "tool_call_id": f"c{i}", "content": "ok"} for i in range(len(calls))]


def call(name: str, **args) -> ToolCall:
    return ToolCall("call_x", name, json.dumps(args))


USER = [{"role": "user", "content": "Book me a hotel in Paris."}]
SEARCHED = USER + turn(("search", {"city": "Paris"}))

# (history, output calls, rule broken or None)
CASES = [
    (USER, [], "premature_answer"),
    (SEARCHED, [], "premature_answer"),
    (SEARCHED + turn(("book", {"city": "Paris"})), [], None),
    (USER, [call("book", city="Paris")], "missing_prerequisite"),
    (SEARCHED, [call("book", city="Rome")], "missing_prerequisite"),  # the match on city
    (SEARCHED, [call("book", city="Paris")], None),
    (USER, [call("search", city="Paris"), call("book", city="Paris")], None),  # same turn, in order
    (USER, [call("book", city="Paris"), call("search", city="Paris")], "missing_prerequisite"),
    (SEARCHED, [call("pay")], "missing_prerequisite"),
    (SEARCHED, [call("submit")], "premature_answer"),  # a terminal call before the required steps
    (SEARCHED + turn(("book", {"city": "Paris"})), [call("submit")], None),
    (SEARCHED + turn(("book", {"city": "Paris"}), ("submit", {})), [call("search", city="Oslo")], "after_terminal"),
    (USER + turn(("submit", {})), [], None),  # after a terminal call the answer is due
    (SEARCHED + turn(("search", {"city": "Paris"})), [call("search", city="Paris")], "repeated_call"),
    (SEARCHED, [call("search", city="Paris")], None),  # the second identical call is still allowed
    (SEARCHED + turn(("search", {"city": "Paris"})), [call("search", city="Rome")], None),
]


@pytest.mark.parametrize("history,calls,rule", CASES)
def test_rules(history, calls, rule):
    verdict = review(FLOW, progress(history), calls)
    assert (verdict.rule if verdict else None) == rule


def test_progress_is_read_from_structured_calls_not_prose():
    told = USER + [{"role": "assistant", "content": 'I called search({"city": "Paris"}) already.'}]
    assert progress(told).calls == []
    # compacted history: the results' text is gone, the calls stay, so the steps still count
    compacted = [{**m, "content": "[tool result compacted]"} if m["role"] == "tool" else m
                 for m in SEARCHED + turn(("book", {"city": "Paris"}))]
    assert review(FLOW, progress(compacted), []) is None
    raw = USER + turn(("search", '{"city": "Paris"}'))  # arguments as the client's JSON string
    assert progress(raw).calls == [("search", {"city": "Paris"})]


def test_nudges_grow_firmer_and_errors_go_to_the_tool_channel():
    verdict = review(FLOW, progress(USER), [])
    first, second = (nudge_messages(verdict, level, "Done!", [])[-1]["content"] for level in (1, 2))
    assert "search, book" in first and first in second and len(second) > len(first)
    bad = [call("search", city="Paris"), call("book", city="Rome")]
    verdict = review(FLOW, progress(USER), bad)
    msgs = nudge_messages(verdict, 1, "", bad)
    assert msgs[0]["role"] == "assistant" and [c["function"]["name"] for c in msgs[0]["tool_calls"]] == ["search", "book"]
    assert msgs[1]["content"].startswith("not run") and msgs[2]["content"].startswith("error: book can only")


def test_nudge_messages_are_openai_shaped():
    """The routes append them like the guard's re-prompts: arguments as the call's JSON string."""
    bad = [call("book", city="Rome")]
    (assistant, result) = nudge_messages(review(FLOW, progress(USER), bad), 1, "", bad)
    assert assistant["tool_calls"][0]["function"]["arguments"] == bad[0].arguments
    assert result == {"role": "tool", "tool_call_id": bad[0].id, "name": "book",
                      "content": "error: book can only be called after search with the same city."}


@pytest.mark.parametrize("value,param", [
    ([], "hearth.workflow"),
    ({"steps": ["search"]}, "hearth.workflow.steps"),
    ({"required": "search"}, "hearth.workflow.required"),
    ({"required": ["nope"]}, "hearth.workflow.required[0]"),
    ({"terminal": ["search", 3]}, "hearth.workflow.terminal[1]"),
    ({"prerequisites": {"tool": "book"}}, "hearth.workflow.prerequisites"),
    ({"prerequisites": [{"tool": "book", "after": "x"}]}, "hearth.workflow.prerequisites[0].after"),
    ({"prerequisites": [{"tool": "book", "after": "search", "match": "city"}]},
     "hearth.workflow.prerequisites[0].match"),
    ({"prerequisites": [{"tool": "book", "after": "search", "when": 1}]}, "hearth.workflow.prerequisites[0].when"),
    ({"max_repeats": "2"}, "hearth.workflow.max_repeats"),
    ({"max_repeats": 0}, "hearth.workflow.max_repeats"),
    ({"max_nudges": True}, "hearth.workflow.max_nudges"),
    ({"max_nudges": 100}, "hearth.workflow.max_nudges"),
])
def test_bad_workflow_names_the_field(value, param):
    with pytest.raises(FieldError) as e:
        parse_workflow(value, TOOLS)
    assert e.value.param == param and str(e.value).startswith(param + ":")


def test_parse_workflow():
    wf = parse_workflow({"required": ["search"], "prerequisites": [{"tool": "book", "after": "search", "match": ["city"]}],
                         "terminal": ["submit"], "max_repeats": 3, "max_nudges": 1}, TOOLS)
    assert wf == Workflow(("search",), (Prerequisite("book", "search", ("city",)),), ("submit",), 3, 1)


def test_unreadable_arguments_count_as_the_same_call_only_with_the_same_text():
    """Broken arguments read as their text (hearth.tool_guard.call_arguments, as the repeated-call
    check reads them): two different broken calls are not one call made twice, nor a call with {}."""
    broken = USER + turn(("search", "city=Paris")) + turn(("search", "city=Paris"))
    assert review(FLOW, progress(broken), [ToolCall("x", "search", "city=Paris")]).rule == "repeated_call"
    assert review(FLOW, progress(broken), [ToolCall("x", "search", "city=Rome")]) is None
    assert review(FLOW, progress(broken), [ToolCall("x", "search", "{}")]) is None
