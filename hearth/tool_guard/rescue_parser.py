"""An OutputParser that, when the format's parser found no call, looks for one the model wrote
without the format's markers (hearth.tool_guard.rescue_calls) and reports what it rescued.

Whole outputs lose the call's text from `content`. A stream has already sent that text as content
when the end shows it was a call: the call is added after it (OpenAI allows content beside calls).
An output max_tokens cut is not rescued: the rescue's lenient repair would close a value the model
did not finish (`{"city": "Pa` -> `{"city": "Pa"}`), a clean call it never wrote
(hearth.tool_parsers.cut: a cut call stays as written); its text stays the text it was."""

from __future__ import annotations

from hearth.tool_guard.guard_event import GuardLog
from hearth.tool_guard.rescue_calls import described, rescue_calls
from hearth.tool_parsers import ContentDelta, Event, OutputParser, ParsedOutput, ToolCallEvent, ToolCallStart


class RescuingParser:
    """Same three methods as OutputParser; `tools` the offered ones (a call of any other is never made)."""

    def __init__(self, parser: OutputParser, tools: list[dict] | None, log: GuardLog):
        self._parser, self._tools, self._log = parser, tools, log
        self._content: list[str] = []
        self._called = False
        self.rescue = None
        """What finish() rescued (its `content`: the text without the calls), or None."""

    def feed(self, delta: str) -> list[Event]:
        return self._seen(self._parser.feed(delta))

    def finish(self, cut: bool = False) -> list[Event]:
        events = self._seen(self._parser.finish(cut))
        if self._called or cut:
            return events
        found = rescue_calls("".join(self._content), self._tools)
        if found is None:
            return events
        self.rescue = found
        self._log.add("rescued", **described(found))
        return events + [ToolCallEvent(i, call) for i, call in enumerate(found.calls)]

    def parse(self, text: str, cut: bool = False) -> ParsedOutput:
        parsed = self._parser.parse(text, cut)
        if parsed.tool_calls or cut:
            return parsed
        found = rescue_calls(parsed.content, self._tools)
        if found is None:
            return parsed
        self._log.add("rescued", **described(found))
        return ParsedOutput(found.content, found.calls, parsed.reasoning)

    def _seen(self, events: list[Event]) -> list[Event]:
        for e in events:
            if isinstance(e, ContentDelta):
                self._content.append(e.text)
            elif isinstance(e, (ToolCallEvent, ToolCallStart)):
                self._called = True
        return events
