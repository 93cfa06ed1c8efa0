"""llama-server's editor stops (n_indent, t_max_predict_ms) fed delta by delta, as its process_token
sees tokens: a line is checked one delta after the one that brought its newline, and cut where its
text starts; the time limit ends the answer at a delta holding a new line."""

from __future__ import annotations

import pytest

from hearth.api.infill_stops import EditorStops

BLOCK = ["a = 1\n", "    b = 2\n", "    c = 3\n", "d = 4\n", "e"]
CASES = [  # (n_indent, deltas, the delta index it stops at, the text kept) -- None: it never stops
    (4, BLOCK, 4, "a = 1\n    b = 2\n    c = 3\n"),
    (0, BLOCK, None, None),
    (5, BLOCK, 2, "a = 1\n    "),  # b's line is indented 4 < 5: cut after its indentation
    # a blank line ends it too: its newline is text after no indentation (llama-server skips only ' ' and tab)
    (4, ["x\n", "    y\n", "\n", "    z"], 3, "x\n    y\n"),
    (4, ["x\n", "    y\n", "  "], None, None),  # indentation alone is not yet a line's text
    (4, ["x\n", "  ", "y"], 2, "x\n  "),  # the first line after the newline, checked once its text comes
    (1, ["x\n", "\ty\n", "z\n", "w"], 3, "x\n\ty\n"),
    (2, ["x\n", "\ty\n", "z\n", "w"], 2, "x\n\t"),  # a tab counts one, as llama-server counts it
]


@pytest.mark.parametrize("n_indent,deltas,at,kept", CASES)
def test_indent(n_indent, deltas, at, kept):
    stops = EditorStops(n_indent=n_indent)
    got = [stops.feed(d, 0.0) for d in deltas]
    if at is None:
        assert got == [None] * len(deltas)
        return
    assert got[:at] == [None] * at and got[at] is not None
    assert stops.text[:got[at]] == kept


def test_time_limit_ends_at_a_new_line():
    stops = EditorStops(t_max_predict_ms=100)
    assert stops.feed("a\n", 50.0) is None  # a new line, but in time
    assert stops.feed("bb", 150.0) is None  # past the time, no new line
    assert stops.feed("c\nd", 160.0) == len("a\nbbc\nd")  # kept whole, as llama-server keeps it
    assert not EditorStops().active and EditorStops(t_max_predict_ms=1).active and EditorStops(n_indent=1).active
