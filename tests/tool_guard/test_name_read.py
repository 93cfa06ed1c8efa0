"""A call read at its tool's name (hearth.tool_guard.name_read) and the router's verdict there
(hearth.tool_guard.routing.early_reason), on hand-made token traces: the name is decided once its
first token is out and one offered name is left; the confidence runs from the opener through the
deciding token; the decline gate reads the first name token's raw probability."""

from __future__ import annotations

import math

import pytest

from hearth.tool_guard import TokenTrace, triggers_for
from hearth.tool_guard.name_read import NameRead, read_name
from hearth.tool_guard.routing import early_reason

HERMES = triggers_for("hermes")


def trace_of(*tokens: tuple[str, float, float | None]) -> list[TokenTrace]:
    """(piece, logprob, raw logprob) per token -> the trace after each token."""
    vocab = [piece.encode() for piece, _, _ in tokens]
    trace, out = TokenTrace(vocab.__getitem__), []
    for i, (piece, lp, raw) in enumerate(tokens):
        trace.add(piece, [i], [{i: lp}], [raw] if raw is not None else None)
        out.append(read_name(trace, HERMES, NAMES))
    return out


NAMES = ["get_weather", "get_wind", "get", "search"]
P = round(math.exp(-0.5), 6)


def test_a_name_is_decided_at_the_token_that_leaves_one_offered_name():
    reads = trace_of(("<tool_call>", -0.5, None), ('\n{"name": "', 0.0, None), ("get_", -0.1, -0.3),
                     ("w", -0.2, None), ("eather", -2.0, -2.5), ('", "arguments": {}}', -3.0, None))
    assert reads[:4] == [None] * 4  # get_w: get_weather or get_wind
    read = reads[4]
    assert read.name == "get_weather" and read.tokens == 5
    assert read.confidence == round(math.exp(-2.0), 6)  # the deciding token, not the arguments after it
    assert (read.opener, read.tool) == (P, round(math.exp(-2.0), 6))
    assert read.first_raw == float(f"{math.exp(-0.3):.3g}")  # the name's first token, before the mask
    assert reads[5] == read  # read again later: the same


def test_the_opener_counts_and_a_unique_first_token_decides_at_once():
    reads = trace_of(("```", -1.5, None), ("json", 0.0, None), ('\n{"name": "', 0.0, None), ("se", -0.1, None),
                     ("arch", 0.0, None))
    assert reads[:3] == [None] * 3  # the name's first token is not out yet
    read = reads[3]
    assert (read.name, read.tokens, read.confidence) == ("search", 4, round(math.exp(-1.5), 6))
    assert (read.opener, read.tool) == (round(math.exp(-1.5), 6), round(math.exp(-0.1), 6))


def test_a_name_that_prefixes_another_waits_for_its_close():
    reads = trace_of(('<tool_call>\n{"name": "', -0.5, None), ("get", -0.5, None), ('", "arguments": {}}', 0.0, None))
    assert reads[1] is None and reads[2].name == "get" and reads[2].confidence == P


def test_the_close_that_decides_a_prefix_name_counts_as_its_choice():
    """`get"` against get_weather: the quote is the choice between them, so its probability is the tool's."""
    reads = trace_of(('<tool_call>\n{"name": "', -0.1, None), ("get", -0.05, None), ('",', -2.0, None),
                     (' "arguments": {}}', -3.0, None))
    torn = round(math.exp(-2.0), 6)
    assert (reads[2].name, reads[2].tokens, reads[2].tool, reads[2].confidence) == ("get", 3, torn, torn)
    assert reads[3] == reads[2]  # the arguments after it do not count


@pytest.mark.parametrize("tokens", [
    [("Sunny", -0.5, None), (" today", -0.5, None)],  # text: no call opened
    [('<tool_call>\n{"name": "', -0.5, None), ("nope", -0.5, None), ('"', 0.0, None)],  # no offered name
])
def test_no_call_or_no_offered_name_reads_nothing(tokens):
    assert trace_of(*tokens)[-1] is None


@pytest.mark.parametrize("confidence,first_raw,tool,lazy,reason", [
    (0.9, 0.9, 1.0, True, None),  # sure: let it finish
    (0.2, 0.9, 1.0, True, "low_confidence"),  # unsure already at its name: the whole call can only be less sure
    (0.3, 0.9, 1.0, True, None),  # at the threshold counts
    (0.9, 0.1, 1.0, True, "declined"),  # the grammar chose the tool (below the decline floor)
    (0.9, 0.1, 1.0, False, None),  # a forced call has no decline gate
    (0.9, 0.9, 0.8, True, "unsure_tool"),  # torn between offered tools (below the tool floor 0.95)
    (0.9, 0.9, 0.95, False, None),
    (None, None, None, True, None),
])
def test_early_reasons(confidence, first_raw, tool, lazy, reason):
    assert early_reason(NameRead("f", confidence, first_raw, 3, tool=tool), 0.3, 0.35, lazy, 0.95) == reason


def test_one_offered_tool_is_no_choice():
    vocab = [b'<tool_call>\n{"name": "', b"sea", b'rch", "arguments": {}}']
    trace = TokenTrace(vocab.__getitem__)
    for i, lp in enumerate((-0.5, -0.7, 0.0)):
        trace.add(vocab[i].decode(), [i], [{i: lp}])
    read = read_name(trace, HERMES, ["search"])
    # judged at the first name token, which a lone tool's grammar forces (reads 1 in a real engine)
    assert (read.name, read.tokens, read.tool, read.confidence) == ("search", 2, None, round(math.exp(-0.7), 6))
