"""hearth.compaction "tiered" with a tiny context: each tier is used only when the one before did
not make the prompt fit; what is kept whole stays whole; a conversation whose kept part alone is too
long is still refused."""

from __future__ import annotations

import pytest

from hearth.tool_guard.compaction import (DROPPED_RESULT, DROPPED_TURNS, Compaction, compact,
                                          parse_compaction)
from hearth.tool_guard.request_fields import FieldError


def rendered(msgs: list[dict]) -> int:
    """A stand-in for render + encode: one token per character of every field a template shows."""
    return sum(len(m.get("content") or "") + len(m.get("reasoning_content") or "") + 10 * len(m.get("tool_calls") or [])
               for m in msgs)


def fits_in(budget: int):
    return lambda msgs: rendered(msgs) <= budget


def agent_loop(steps: int, result_chars: int = 400) -> list[dict]:
    msgs = [{"role": "system", "content": "S" * 20}, {"role": "user", "content": "U" * 20}]
    for i in range(steps):
        msgs.append({"role": "assistant", "content": "", "reasoning_content": "r" * 100,
                     "tool_calls": [{"id": f"c{i}", "type": "function", "function": {"name": "read", "arguments": {}}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"{i}" * result_chars})
    return msgs


OPTS = Compaction(keep_last=2, shorten_to=50)


def test_fitting_conversation_is_untouched():
    msgs = agent_loop(3)
    out, report = compact(msgs, fits_in(10**6), OPTS)
    assert out == msgs and report.tiers == []


def test_tiers_go_in_order_and_stop_as_soon_as_it_fits():
    msgs = agent_loop(6)  # 40 + 6 * (100 + 10 + 400) = 3100
    kept = msgs[:2] + msgs[-4:]
    # old steps: 4 x (100 reasoning + 10 call + 400 result); shortened results are 79 characters, dropped 23
    for budget, tiers in [(2800, ["shorten_tool_results"]),
                          (1700, ["shorten_tool_results", "drop_tool_results"]),
                          (1200, ["shorten_tool_results", "drop_tool_results", "drop_reasoning"]),
                          (1180, ["shorten_tool_results", "drop_tool_results", "drop_reasoning", "drop_steps"])]:
        out, report = compact(msgs, fits_in(budget), OPTS)
        assert report.tiers == tiers and rendered(out) <= budget
        assert out[:2] == kept[:2] and out[-4:] == kept[-4:]  # system, first user, last 2 steps: whole
    assert out[2]["tool_calls"][0]["id"] == "c1"  # only the oldest step went
    assert report.counts == {"tool_results_shortened": 4, "tool_results_dropped": 4, "reasoning_dropped": 4,
                             "messages_dropped": 2}


def test_shortened_results_say_how_much_went():
    out, report = compact(agent_loop(3), fits_in(1500), OPTS)
    assert out[3]["content"] == "0" * 50 + " … [350 characters compacted]"
    assert out[5]["content"] == "1" * 400 and report.counts == {"tool_results_shortened": 1}


def test_dropped_results_keep_their_calls():
    out, _ = compact(agent_loop(4), fits_in(1400), OPTS)
    assert [m["content"] for m in out if m["role"] == "tool"][:2] == [DROPPED_RESULT] * 2
    assert [m["tool_calls"][0]["id"] for m in out if m.get("tool_calls")] == ["c0", "c1", "c2", "c3"]


def test_dropping_user_turns_keeps_roles_alternating():
    msgs = [{"role": "user", "content": "first"}]
    for i in range(5):
        msgs += [{"role": "assistant", "content": "a" * 100}, {"role": "user", "content": f"q{i}" * 50}]
    out, report = compact(msgs, fits_in(600), Compaction(keep_last=2))  # drops 5 steps: user meets user
    roles = [m["role"] for m in out]
    assert all(a != b for a, b in zip(roles, roles[1:])) and out[0]["content"] == "first"
    assert DROPPED_TURNS in [m["content"] for m in out] and "drop_steps" in report.tiers


def test_what_must_be_kept_does_not_fit():
    assert compact(agent_loop(3), fits_in(30), OPTS) is None


@pytest.mark.parametrize("value,expected", [
    ("tiered", Compaction()), ("off", None), ({"mode": "tiered", "keep_last": 1}, Compaction(keep_last=1)),
    ({"shorten_to": 100}, Compaction(shorten_to=100))])
def test_parse(value, expected):
    assert parse_compaction(value) == expected


@pytest.mark.parametrize("value,param", [
    ("always", "hearth.compaction"), (3, "hearth.compaction"), ({"mode": "fast"}, "hearth.compaction.mode"),
    ({"keep": 2}, "hearth.compaction.keep"), ({"keep_last": "2"}, "hearth.compaction.keep_last"),
    ({"keep_last": -1}, "hearth.compaction.keep_last"), ({"shorten_to": 3}, "hearth.compaction.shorten_to")])
def test_bad_compaction_names_the_field(value, param):
    with pytest.raises(FieldError) as e:
        parse_compaction(value)
    assert e.value.param == param


def test_a_shortened_result_never_cuts_an_image_marker_in_half():
    marker = "<__hearth_image_0123456789abcdef_7__>"  # hearth.media.marker's: an Anthropic tool_result's image
    msgs = agent_loop(4)
    msgs[3]["content"] = "a" * 40 + marker + "b" * 400  # shorten_to (50) falls inside the marker
    msgs[5]["content"] = "a" * 5 + marker + "b" * 400  # the marker ends before 50: it stays whole
    out, report = compact(msgs, fits_in(1600), OPTS)
    assert report.tiers == ["shorten_tool_results"]
    assert out[3]["content"].startswith("a" * 40 + " … [") and "<__hearth_image_" not in out[3]["content"]
    assert out[5]["content"].startswith("a" * 5 + marker + "b" * 8 + " … [")
