"""A call read as far as its tool's name, while it is still being written: the first point where a
router can judge it (hearth.tool_guard.routing.early_reason). The name is known once its first
token is out (the decline gate reads that token's raw probability) and the offered names agree
with only one tool (`get_w` of get_weather and get_wind is not yet a choice; `get_we` is). After
that the grammar forces the rest of the name, so those tokens read 1 over what it allowed: the
lowest probability from the opener through the name's deciding token is the call's confidence in
its tool, and a bound on the whole call's (hearth.tool_guard.confidence), which only gets lower."""

from __future__ import annotations

from dataclasses import dataclass

from hearth.tool_guard.confidence import CLOSERS, TokenTrace, call_spans
from hearth.tool_guard.declined import name_start
from hearth.tool_guard.triggers import Trigger


@dataclass(frozen=True, slots=True)
class NameRead:
    name: str
    """The offered tool the name can only be."""
    confidence: float | None
    """The lowest probability (over what the grammar allowed) from the call's opener through the
    token that decided the name."""
    first_raw: float | None
    """The raw probability (before the grammar's mask) of the name's first token: the decline gate's
    reading (hearth.tool_guard.declined)."""
    tokens: int
    """Output tokens up to and including the deciding one."""
    opener: float | None = None
    """The lowest probability before the name (the opener: the model's intent to call)."""
    tool: float | None = None
    """The lowest over the name's tokens through the deciding one (its choice among the tools);
    None when one tool is offered (no choice)."""


def read_name(trace: TokenTrace, triggers: list[Trigger], names: list[str]) -> NameRead | None:
    """The first call's name, once it is decided; None before (or when no call has opened)."""
    spans = call_spans(trace.text, triggers, CLOSERS)
    if not spans:
        return None
    start, end = spans[0]
    at, raw = name_start(trace.text, start, end), trace.text.encode()
    if at is None or at >= len(raw):  # the name's first token is not out yet
        return None
    written = raw[at:end].decode("utf-8", "ignore")
    decided = _decided(written, names)
    if decided is None:
        return None
    name, chars = decided
    stop = at + max(len(written[:chars].encode()), 1)  # the deciding byte's end (the first name byte at least)
    tokens = sum(1 for a, _, _ in trace.spans if a < stop)
    return NameRead(name, trace.min_prob(start, stop), trace.raw_prob(at, at + 1), tokens,
                    trace.min_prob(start, at), trace.min_prob(at, stop) if chars else None)


def _decided(written: str, names: list[str]) -> tuple[str, int] | None:
    """(the tool, how many characters of `written` decided it: 0 when one tool is offered) once
    `written` (the name so far, maybe with what follows it) leaves one offered name; None while
    several remain or none does."""
    closed = written.find('"')
    partial = written if closed < 0 else written[:closed]
    for k in range(len(partial) + 1):  # the shortest prefix that leaves one name
        left = [n for n in names if n.startswith(partial[:k])]
        if len(left) <= 1:
            whole = left and left[0].startswith(partial) and (closed < 0 or left[0] == partial)
            return (left[0], k) if whole else None
    # a name that is a prefix of another (get, get_weather) is decided by its close: the quote counts
    return (partial, len(partial) + 1) if closed >= 0 and partial in names else None
