"""Tool calls out of a stream of text deltas, for any registered format.

Content goes out as soon as it cannot be the start of the format's START marker (only a possible
marker prefix is held back). From START the text is buffered until END, the next START of an
end-less format, or the end of the stream, and then parsed with rescue; a region that holds no
call goes out as the content it was. Nothing raises: a malformed model output is text, never a 500.
The non-streaming parse is this same machine fed once, so both agree by construction. An output
that max_tokens cut off (finish(cut=True)) inside a call keeps it as a call: hearth.tool_parsers.cut."""

from __future__ import annotations

from hearth.tool_parsers.cut import cut_calls
from hearth.tool_parsers.early_call import JSON_FORMATS, EarlyCall
from hearth.tool_parsers.formats import get_format
from hearth.tool_parsers.holdback import Trim, held_prefix
from hearth.tool_parsers.lenient_json import cut_off
from hearth.tool_parsers.types import ContentDelta, Event, ToolCall, ToolCallEvent

_LEAD, _TEXT, _CALL = "lead", "text", "call"


class StreamingToolParser:
    def __init__(self, fmt: str, tools: list[dict] | None = None, announce: bool = True,
                 required: bool = False, named: str | None = None):
        """announce: for a streaming client, JSON calls' id, name and arguments go out as written
        (hearth.tool_parsers.early_call); without one, a call is a call only once it parses whole.
        required: tool_choice forces a call (required, or `named`, the tool it names): an output
        cut off before or inside it is that call, never content (hearth.tool_parsers.cut)."""
        self._required, self._named = required or named is not None, named
        self._fmt = get_format(fmt)
        own = getattr(self._fmt, "Stream", None)  # a format that parses the whole output itself (harmony)
        self._own = own(tools, announce, required, named) if own else None
        self._announce = announce and fmt in JSON_FORMATS
        self._early: EarlyCall | None = None
        self._tools = tools
        self._leads: tuple[str, ...] = getattr(self._fmt, "LEADS", ())
        self._state = _LEAD if self._leads else _TEXT
        self._buf = ""
        self._opened = ""  # the marker that opened the current region, to give it back as text
        self._searched = 0  # in a region, _buf[:_searched] holds no complete end marker
        self._count = 0
        self._trim = Trim()
        self._steps = {_LEAD: self._lead, _TEXT: self._text, _CALL: self._call}

    def feed(self, delta: str) -> list[Event]:
        if self._own is not None:
            return self._own.feed(delta)
        self._buf += delta
        events: list[Event] = []
        while self._steps[self._state](events):
            pass
        return events

    def finish(self, cut: bool = False) -> list[Event]:
        """End of output: an unterminated region is parsed with rescue or given back as text.
        cut: max_tokens ended the output (finish_reason "length"): a region it cut is a cut call."""
        if self._own is not None:
            return self._own.finish(cut)
        events: list[Event] = []
        if self._state == _CALL:
            self._announced(events, self._buf)
            is_open = getattr(self._fmt, "is_open", None)  # a body of its own cut off (XML, Gemma's)
            if cut and (cut_off(self._buf) or (is_open is not None and is_open(self._buf)) or not self._parse(self._buf)):
                self._cut(events, self._buf)
            else:
                self._close(events, self._buf, "")
        elif cut and self._required and not self._count:  # the forced call's marker was all there was
            self._cut(events, "")
        else:
            self._content(events, self._buf)
        self._buf = ""
        held = self._trim.flush()
        return events + [ContentDelta(held)] if held else events

    def _lead(self, events: list[Event]) -> bool:
        """Start of output, for formats whose calls may open it without a marker."""
        head = self._buf.lstrip()
        if any(head.startswith(lead) for lead in self._leads):
            self._state, self._opened, self._searched = _CALL, "", 0
            return True
        if not head or any(lead.startswith(head) for lead in self._leads):
            return False  # still could become a lead
        self._state = _TEXT
        return True

    def _text(self, events: list[Event]) -> bool:
        start = self._fmt.START
        i = self._buf.find(start) if start else -1
        if i < 0:
            keep = held_prefix(self._buf, start)
            self._content(events, self._buf[:len(self._buf) - keep])
            self._buf = self._buf[len(self._buf) - keep:]
            return False
        self._content(events, self._buf[:i])
        self._buf = self._buf[i + len(start):]
        self._state, self._opened, self._searched = _CALL, start, 0
        return True

    def _call(self, events: list[Event]) -> bool:
        end = self._fmt.END
        stop = end or self._fmt.START  # an end-less region runs to the next START
        j = self._buf.find(stop, self._searched) if stop else -1
        start = self._fmt.START
        if not self._opened and end and start:  # a lead region (```json {...} ```) ends where a tagged call opens
            k = self._buf.find(start, max(0, self._searched - len(start)))
            if k >= 0 and (j < 0 or k < j):
                j, end = k, ""
        if j < 0:
            self._searched = max(0, len(self._buf) - len(stop) + 1)
            self._announced(events, self._buf[:len(self._buf) - held_prefix(self._buf, stop)])
            return False
        self._announced(events, self._buf[:j])
        region, self._buf = self._buf[:j], self._buf[j + len(end):]
        self._state = _TEXT
        self._close(events, region, end)
        return True

    def _announced(self, events: list[Event], region: str) -> None:
        if not self._announce:
            return
        if self._early is None:
            self._early = EarlyCall(self._count, self._tools)
        events += self._early.update(region)

    def _close(self, events: list[Event], region: str, end: str) -> None:
        calls = self._parse(region)
        early, self._early = self._early, None
        if early is not None and early.started:
            calls = early.settle(calls, region)
        if not calls:
            self._content(events, self._opened + region + end)
            return
        self._emit(events, calls)

    def _cut(self, events: list[Event], region: str) -> None:
        """A region max_tokens cut: its call as written so far; without one, dropped where it is
        known to be a call (a START marker opened it, or a call is forced), else the text it was."""
        early, self._early = self._early, None
        calls = cut_calls(region, self._tools, self._named if not self._count else None, early)
        if calls:
            self._emit(events, calls)
        elif self._opened or self._required:
            self._trim.boundary()  # layout before the dropped call is not content
        else:
            self._content(events, region)

    def _emit(self, events: list[Event], calls: list[ToolCall]) -> None:
        if not calls:
            return
        self._trim.boundary()
        for call in calls:
            events.append(ToolCallEvent(self._count, call))
            self._count += 1

    def _parse(self, region: str) -> list[ToolCall]:
        try:
            return list(self._fmt.parse(region, self._tools) or [])
        except Exception:  # noqa: BLE001 - any failure to parse model output means "this is text"
            return []

    def _content(self, events: list[Event], text: str) -> None:
        out = self._trim.text(text)
        if out:
            events.append(ContentDelta(out))


def parse_tool_calls(text: str, fmt: str, tools: list[dict] | None = None) -> tuple[str, list[ToolCall]]:
    """A whole output -> (content, calls)."""
    parser = StreamingToolParser(fmt, tools, announce=False)
    events = parser.feed(text) + parser.finish()
    content = "".join(e.text for e in events if isinstance(e, ContentDelta))
    return content, [e.call for e in events if isinstance(e, ToolCallEvent)]
