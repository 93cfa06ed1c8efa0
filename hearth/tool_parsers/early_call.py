"""A JSON tool call announced while it is still being written: once a region reads
`{"name": "<offered tool>", "arguments": {` (or `"parameters"`) and a first argument value has
begun, the call's id and name go out,
then the certain prefix of its arguments as it grows (hearth.tool_parsers.partial_json).

Once announced, the region stays this call: at its end the parsed call keeps the announced id and
name. If its arguments do not continue what was sent (a repeated key: json.loads keeps the last), or
the region no longer parses (NaN, a number past a double: 1e400), the call's arguments are the sent
prefix followed by the model's own text after it, so a client that joined the pieces holds what the
model wrote, nothing dropped: a repeated key reads as the parse does; arguments that are not JSON
mark the call `unparsed` with the reason (the guard makes that an invalid_arguments problem; without
it the client's own parse of the arguments fails, as for any model that writes broken JSON)."""

from __future__ import annotations

import re

from hearth.tool_parsers.lenient_json import object_error, split_values
from hearth.tool_parsers.partial_json import certain_span
from hearth.tool_parsers.types import (Event, ToolCall, ToolCallArgumentsDelta, ToolCallStart, new_call_id,
                                       tool_parameters)

# Qwen2.5 copies its template's doubled brace (`{{"name": ...`): allowed
_HEADER = re.compile(r'\s*(?:```json\s*)?\{\{?\s*"name"\s*:\s*"([^"\\]+)"\s*,\s*"(?:arguments|parameters)"\s*:\s*(?=\{)')
JSON_FORMATS = frozenset({"hermes", "llama3_json", "bare_json"})


class EarlyCall:
    def __init__(self, index: int, tools: list[dict] | None):
        self.index, self._tools = index, tools
        self.id: str | None = None
        self.name = ""
        self.sent = ""
        self._read = 0  # where in the arguments' text the source of `sent` ends

    @property
    def started(self) -> bool:
        return self.id is not None

    def update(self, region: str) -> list[Event]:
        """Events for the region's text so far."""
        events: list[Event] = []
        if not self.started:
            m = _HEADER.match(region)
            if not m or (self._tools is not None and m.group(1) not in tool_parameters(self._tools)):
                return events
            certain, _, _ = certain_span(region[m.end():])
            if len(certain) < 2:  # not before a first argument value (or `{}`): `{"city": </tool_call>` stays text
                return events
            self.id, self.name, self._start = new_call_id(), m.group(1), m.end()
            events.append(ToolCallStart(self.index, self.id, self.name))
        certain, _, read = certain_span(region[self._start:])
        if certain.startswith(self.sent) and len(certain) > len(self.sent):
            events.append(ToolCallArgumentsDelta(self.index, certain[len(self.sent):]))
            self.sent, self._read = certain, read
        return events

    def settle(self, calls: list[ToolCall], region: str) -> list[ToolCall]:
        """The region's parsed calls (of its whole text), the first one made to agree with what was
        announced."""
        first = calls[0] if calls else None
        if first is not None and first.name == self.name and first.arguments.startswith(self.sent):
            return [ToolCall(self.id, self.name, first.arguments), *calls[1:]]
        written = as_written(region[self._start:], self.sent, self._read)
        return [ToolCall(self.id, self.name, written, object_error(written)), *calls[1:]]

    def cut(self, region: str) -> str:
        """The announced call's arguments when the output ended inside its region (hearth.tool_parsers.cut)."""
        return as_written(region[self._start:], self.sent, self._read)


def as_written(text: str, sent: str | None = None, read: int = 0) -> str:
    """The arguments value that opens `text` as the model wrote it (to the end of the text when cut
    off): the canonical prefix a stream sent (`sent`, its source ending at `read`; None: the certain
    prefix of `text`, as a stream would have sent it) and the model's own text after it."""
    if sent is None:
        sent, _, read = certain_span(text)
    values = split_values(text)
    written = sent + text[read:len(values[0]) if values else len(text)]
    return written if written.strip() else ""
