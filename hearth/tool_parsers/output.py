"""The one parser the server holds per response: reasoning is split off first, then tool calls are
parsed from the content that remains. Streaming (feed/finish) and whole-output (parse) views agree."""

from __future__ import annotations

from hearth.tool_parsers.formats import get_format
from hearth.tool_parsers.reasoning import Marks, StreamingReasoningParser
from hearth.tool_parsers.stream import StreamingToolParser
from hearth.tool_parsers.types import ContentDelta, Event, ParsedOutput, collect


class OutputParser:
    """`tool_format` None: no tool parsing (pass None when the request has no tools, else any
    `{"name": ...}` the model writes would become a call). `tools` None accepts any tool name, an
    empty list none."""

    def __init__(self, tool_format: str | None = None, tools: list[dict] | None = None,
                 reasoning: bool = False, starts_in_reasoning: bool = False, announce: bool = True,
                 required: bool = False, named: str | None = None, channels: str | None = None,
                 marks: Marks | None = None):
        """announce: calls stream as written (a streaming client; StreamingToolParser); required /
        named: what tool_choice forces, for an output max_tokens cuts (hearth.tool_parsers.cut);
        channels: a format that parses the whole output itself (hearth.tool_parsers.formats.detect_channels:
        harmony's analysis and final channels), which then does, calls only where tool_format is set;
        marks: the template's reasoning marks (hearth.tool_parsers.reasoning.reasoning_marks)."""
        self._config = (tool_format, tools, reasoning, starts_in_reasoning, announce, required, named, channels, marks)
        own = getattr(get_format(channels), "Stream", None) if channels else None
        self._whole = own(tools, announce, required, named, calls=tool_format is not None) if own else None
        self._reasoning = (StreamingReasoningParser(starts_in_reasoning, marks)
                           if reasoning or starts_in_reasoning else None)
        self._tools = StreamingToolParser(tool_format, tools, announce, required, named) if tool_format else None

    def feed(self, delta: str) -> list[Event]:
        """Events for one text delta of the model's output."""
        if self._whole is not None:
            return self._whole.feed(delta)
        events = self._reasoning.feed(delta) if self._reasoning else [ContentDelta(delta)]
        return self._route(events)

    def finish(self, cut: bool = False) -> list[Event]:
        """Events for what was held back, at the end of the output; cut: max_tokens ended it."""
        if self._whole is not None:
            return self._whole.finish(cut)
        events = self._route(self._reasoning.finish() if self._reasoning else [])
        return events + self._tools.finish(cut) if self._tools else events

    def parse(self, text: str, cut: bool = False) -> ParsedOutput:
        """A whole output at once (a fresh parser: this one's stream is untouched)."""
        fresh = OutputParser(*self._config)
        return collect(fresh.feed(text) + fresh.finish(cut))

    def _route(self, events: list[Event]) -> list[Event]:
        """Content goes on through the tool parser; reasoning goes straight out."""
        out: list[Event] = []
        for event in events:
            if not isinstance(event, ContentDelta):
                out.append(event)
            elif self._tools:
                out += self._tools.feed(event.text)
            elif event.text:
                out.append(event)
        return out
