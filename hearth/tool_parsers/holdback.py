"""What a streaming parser holds back: a possible marker prefix, and layout whitespace.

Whitespace next to a tool call or the end of reasoning is layout, not content: templates and
models put newlines around `<tool_call>` and after `</think>`, and sent as content they would make
an empty-looking message beside the calls. Both decisions depend on the text alone, so any split
of a stream into deltas gives the same result."""

from __future__ import annotations


def held_prefix(text: str, marker: str) -> int:
    """Length of the longest end of `text` that is a proper prefix of `marker`: the part that
    must wait for the next delta because it may still become the marker."""
    for k in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-k:]):
            return k
    return 0


class Trim:
    """Whitespace-only text beside a boundary (a tool call, `<think>`, `</think>`) is dropped; the
    whitespace between two pieces of text is kept even across a call ("Hi <call> bye" ->
    "Hi  bye"), and an output without boundaries passes unchanged. Trailing whitespace is held
    until it is known which of these it is."""

    def __init__(self, after_boundary: bool = False):
        self._started = False  # text other than whitespace has gone out
        self._held = ""  # whitespace since the last text
        self._after_boundary = after_boundary  # a boundary came after the last text

    def text(self, s: str) -> str:
        """What of `s` can be sent now."""
        core = s.strip()
        if not core:
            self._held += s
            return ""
        start = s.index(core[0])
        lead = "" if self._after_boundary and not self._started else self._held + s[:start]
        self._started, self._after_boundary = True, False
        self._held = s[start + len(core):]
        return lead + core

    def boundary(self) -> None:
        self._after_boundary = True

    def flush(self) -> str:
        """At the end of the output: held whitespace is content unless a boundary followed it."""
        held, self._held = self._held, ""
        return "" if self._after_boundary else held
