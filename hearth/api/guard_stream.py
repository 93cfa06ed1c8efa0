"""Which of a guarded attempt's calls go out while they are written (issue 21's streamed calls
under issue 20's guard): as OpenAI streams calls, the id and name once the name is complete, then
the arguments in pieces (the parser's ToolCallStart / ToolCallArgumentsDelta events, the same ones
the server without the guard sends).

The guard may reject, coerce, decline or retry a call once it ended; a streamed call cannot be
taken back. So a call streams only where none of that can happen to it: in mode `guard`, a call
the grammar held (hearth.tool_guard.held: its tool's schema and its region), which the decline
gate lets through at its name, after only streamed calls; in mode `grammar` (no validation, no
retries) every announced call. Nothing streams while a workflow reviews the answer, nor in mode
`guard` when stop strings or stop tokens could cut a call short. Every other call is held and sent
whole once validated, as before. hearth.api.guarded never retries past a streamed call.

A held call the decline gate reads as the grammar's choice (its floor set) withholds the text after
it: should the guard decline the call, the answer from its opener on is the model's own
unconstrained continuation (hearth.api.guarded), and that text must not have gone out first."""

from __future__ import annotations

from dataclasses import dataclass, replace

from hearth.tool_guard import call_spans, triggers_for
from hearth.tool_guard.checks import Checked
from hearth.tool_guard.confidence import CLOSERS, TokenTrace
from hearth.tool_guard.declined import overridden
from hearth.tool_guard.held import region_held
from hearth.tool_parsers import (ContentDelta, arguments_rest, Event, ReasoningDelta, ToolCallArgumentsDelta, ToolCallEvent,
                                 ToolCallStart)


@dataclass(frozen=True, slots=True)
class StreamRules:
    """What one attempt's calls may stream under."""
    open: bool
    """False: no call streams (a workflow reviews the answer; stop strings could cut a call)."""
    validated: bool
    """Mode `guard`: calls are validated, coerced, declined and retried, so only held calls stream."""
    grammar: str
    """This attempt's call grammar: "lazy", "forced" or "none"."""
    parallel: bool
    fmt: str
    held: frozenset[str]
    """The tools whose schemas this attempt's grammar holds (hearth.tool_guard.held.schema_held)."""
    decline_floor: float | None
    """The decline gate's floor where it judges this attempt's calls (hearth.tool_guard.declined)."""
    offset: int = 0
    """Calls kept from the attempt this one resamples: they come first."""


class CallStream:
    """One attempt's parser events -> what the client may see now: text, reasoning and the pieces of
    the calls that stream (indexes shifted past the kept calls). Once one call is held, every later
    one is, so the streamed calls are always the first ones."""

    def __init__(self, rules: StreamRules, trace: TokenTrace):
        self.rules, self.trace = rules, trace
        self.count = 0
        """Calls streamed so far (this attempt's first ones)."""
        self._sent: dict[int, str] = {}  # parser index -> the arguments text sent
        self._closed = not rules.open
        self.gated: int | None = None
        """The first held call the decline gate reads as the grammar's choice (parser index), if any."""
        self.withheld: list[Event] = []
        """The text after it, held back until the guard decides (release)."""

    def events(self, events: list[Event]) -> list[Event]:
        out: list[Event] = []
        shift = self.rules.offset
        for e in events:
            if isinstance(e, (ContentDelta, ReasoningDelta)) and self.gated is not None:
                self.withheld.append(e)
            elif isinstance(e, (ContentDelta, ReasoningDelta)):
                out.append(e)
            elif isinstance(e, ToolCallStart):
                if self._closed or e.index != self.count or not self._may_stream(e.index, e.name):
                    self._closed = True
                    continue
                self._sent[e.index] = ""
                self.count += 1
                out.append(replace(e, index=e.index + shift))
            elif isinstance(e, ToolCallArgumentsDelta) and e.index in self._sent:
                self._sent[e.index] += e.text
                out.append(replace(e, index=e.index + shift))
            elif isinstance(e, ToolCallEvent) and e.index in self._sent:
                sent = self._sent[e.index]
                rest = arguments_rest(e.call.arguments, sent)
                if rest:  # the call is complete: the rest of its arguments now, not at the attempt's end
                    self._sent[e.index] += rest
                    out.append(ToolCallArgumentsDelta(e.index + shift, rest))
            elif isinstance(e, ToolCallEvent):
                self._closed = True  # a call that was never announced (rescued, a second in its region)
                if self.gated is None and self._overridden(e.index):
                    self.gated = e.index
        return out

    def release(self) -> list[Event]:
        """The withheld text, once the guard kept the gated call (no rewrite follows)."""
        out, self.withheld, self.gated = self.withheld, [], None
        return out

    def _overridden(self, k: int) -> bool:
        """The decline gate reads call k's name as the grammar's choice (only where it judges)."""
        if self.rules.decline_floor is None:
            return False
        spans = call_spans(self.trace.text, triggers_for(self.rules.fmt), CLOSERS)
        return k < len(spans) and overridden(self.trace, spans[k], self.rules.decline_floor) is not None

    def _may_stream(self, k: int, name: str) -> bool:
        r = self.rules
        if not r.validated:
            return True
        if r.grammar == "none" or name not in r.held:
            return False
        if not region_held(self.trace.text, r.fmt, k, r.parallel, r.grammar == "forced"):
            return False
        return not self._overridden(k)


def as_sent(checked: Checked, held: list, n: int) -> Checked:
    """An attempt's checked calls with its first n (streamed) calls as the client has them: a
    coercion of a held call cannot happen (the grammar admits only what passes unchanged), and if
    it ever did the client's copy would still be the truth."""
    if n:
        checked.calls[:n] = held[:n]
        checked.coercions = [(i, c) for i, c in checked.coercions if i >= n]
    return checked
