"""OpenAI's harmony format (gpt-oss). The whole output is a run of messages, a header then a body:

    <|channel|>analysis<|message|>The user wants the weather.<|end|>
    <|start|>assistant<|channel|>final<|message|>It is sunny.<|return|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>

The prompt ends with `<|start|>assistant`, so the first header has no role; the recipient
`to=functions.NAME` may stand before `<|channel|>` too (as the template writes calls back). The header
says where a body goes: analysis -> reasoning, final and commentary (a preamble) -> content, a body
sent to a recipient -> a call of NAME (`functions.` dropped) with the body as its JSON arguments.
`<|return|>` and `<|call|>` end generation (EOG, hearth.loader.vocab), so they seldom reach the text;
`<|channel|>`, `<|message|>`, `<|start|>`, `<|constrain|>` and `<|end|>` are printed (llama.cpp's rule).

Channels and calls are one grammar here, so this record brings its own streaming parser (`Stream`),
used with or without tools (OutputParser's `channels`). Text with no header is content. A call is
announced and cut as the JSON formats' are, seen as their region `{"name": NAME, "arguments": BODY`
(hearth.tool_parsers.early_call, hearth.tool_parsers.cut). A body that is no call (not a JSON object,
no offered tool) goes to its channel as text: markup never reaches content. vLLM's and llama.cpp's
gpt-oss parsers read the same (analysis or commentary calls, the recipient in either place)."""

from __future__ import annotations

import json
import re

from hearth.tool_parsers.cut import cut_calls
from hearth.tool_parsers.early_call import EarlyCall
from hearth.tool_parsers.holdback import Trim, held_prefix
from hearth.tool_parsers.lenient_json import cut_off, json_values
from hearth.tool_parsers.rescue import to_call
from hearth.tool_parsers.types import ContentDelta, Event, ReasoningDelta, ToolCall, ToolCallEvent, collect

START = "<|channel|>"  # the three-name protocol: a message opens at its channel; calls end the output
END = ""
SIGNATURE = "<|channel|>"
"""What a harmony chat template writes (hearth.tool_parsers.formats detects the format by it)."""
NAMESPACE = "functions."
OPENER = "<|channel|>commentary to=" + NAMESPACE
"""How the model opens a call of a function tool."""
MESSAGE = "<|message|>"
CALL_TEXT = (OPENER, " <|constrain|>json" + MESSAGE)
"""A call as the template shows it: CALL_TEXT[0] + NAME + CALL_TEXT[1] + the JSON arguments (the grammar
of a forced call: hearth.tool_parsers.schema)."""
ROLE_CALL_TEXT = ("<|start|>assistant to=" + NAMESPACE, "<|channel|>commentary json" + MESSAGE)
"""The same with the recipient in the role, as the template writes a call back."""
REASONING_TEXT = ("<|channel|>analysis" + MESSAGE, "<|end|><|start|>assistant")
"""An analysis message as it opens and closes before a next one: what a forced call may follow."""
_ENDS = ("<|end|>", "<|call|>", "<|return|>")  # a body's end, dropped
_OPENS = ("<|start|>", "<|channel|>")  # a next header with no end before it (read leniently)
_MARKERS = _ENDS + _OPENS
_HEADS = ("<|start|>", "<|channel|>", "<|constrain|>", "to=")  # how a header may begin (after layout)
_MAX_HEADER = 256  # a longer "header" with no <|message|> is text
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")
_CHANNEL = re.compile(r"<\|channel\|>\s*([\w.-]+)")
_START, _PLAIN, _HEADER, _BODY = "start", "plain", "header", "body"
_REASONING, _CONTENT, _CALL = "reasoning", "content", "call"


class Stream:
    """feed(delta) / finish(cut) -> events, as StreamingToolParser; calls=False: a request without
    tools (a body sent to a recipient goes to its channel as text)."""

    def __init__(self, tools: list[dict] | None = None, announce: bool = True, required: bool = False,
                 named: str | None = None, calls: bool = True):
        self._tools, self._announce, self._calls = tools, announce, calls
        self._required, self._named = required or named is not None, named
        self._state, self._buf = _START, ""
        self._kind, self._fallback, self._name, self._body = _CONTENT, _CONTENT, "", ""
        self._early: EarlyCall | None = None
        self._count = 0
        self._content, self._reasoning = Trim(), Trim(after_boundary=True)
        self._steps = {_START: self._start, _PLAIN: self._plain, _HEADER: self._header, _BODY: self._message}

    def feed(self, delta: str) -> list[Event]:
        self._buf += delta
        events: list[Event] = []
        while self._steps[self._state](events):
            pass
        return events

    def finish(self, cut: bool = False) -> list[Event]:
        """End of output: a body's held text goes to its channel, a call is parsed (cut: max_tokens
        ended it, hearth.tool_parsers.cut), a header cut short is markup and dropped."""
        events: list[Event] = []
        if self._state == _BODY:
            self._to(events, self._kind, self._buf)
            self._buf = ""
            if self._kind == _CALL:
                self._close_call(events, cut)
        elif cut and self._required and not self._count:  # the forced call's header was all there was
            self._emit(events, cut_calls("", self._tools, self._named, None))
        elif self._state in (_START, _PLAIN):
            self._to(events, _CONTENT, self._buf)
        self._buf = ""
        held = self._content.flush()
        return events + [ContentDelta(held)] if held else events

    def _start(self, events: list[Event]) -> bool:
        """The output's start, or after a message's end: a header, or text with none."""
        head = self._buf.lstrip()
        if any(head.startswith(h) for h in _HEADS):
            self._state = _HEADER
            return True
        if not head or any(h.startswith(head) for h in _HEADS):
            return False  # layout, or what may still become a header
        self._state = _PLAIN
        return True

    def _plain(self, events: list[Event]) -> bool:
        """Content up to a marker: a header opens a message, an end marker is dropped."""
        i, marker = _first(self._buf, _MARKERS)
        if i < 0:
            keep = max(held_prefix(self._buf, m) for m in _MARKERS)
            self._to(events, _CONTENT, self._buf[:len(self._buf) - keep])
            self._buf = self._buf[len(self._buf) - keep:]
            return False
        self._to(events, _CONTENT, self._buf[:i])
        self._buf = self._buf[i + len(marker):] if marker in _ENDS else self._buf[i:]
        self._state = _START if marker in _ENDS else _HEADER
        return True

    def _header(self, events: list[Event]) -> bool:
        """A header up to `<|message|>`; only its first _MAX_HEADER characters count, so that every
        split of the text into deltas reads it the same."""
        i = self._buf.find(MESSAGE, 0, _MAX_HEADER)
        j, marker = _first(self._buf[:_MAX_HEADER], _ENDS)
        if 0 <= j and (i < 0 or j < i):  # a header that ends before its body: markup, dropped
            self._buf, self._state = self._buf[j + len(marker):], _START
            return True
        if i >= 0:
            self._open(self._buf[:i])
            self._buf, self._state = self._buf[i + len(MESSAGE):], _BODY
            return True
        if len(self._buf) < _MAX_HEADER:
            return False
        # no header after all: text (its first character goes, so the marker it opens with is text too)
        self._to(events, _CONTENT, self._buf[:1])
        self._buf, self._state = self._buf[1:], _PLAIN
        return True

    def _open(self, header: str) -> None:
        """Where the body of a message with this header goes."""
        channel = _CHANNEL.search(header)
        recipient = _RECIPIENT.search(header)
        self._fallback = _REASONING if channel and channel.group(1) == "analysis" else _CONTENT
        self._kind = self._fallback
        if recipient and self._calls and recipient.group(1) != "assistant":
            name = recipient.group(1)
            self._kind, self._name, self._body = _CALL, name.removeprefix(NAMESPACE), ""

    def _message(self, events: list[Event]) -> bool:
        """A body, up to its end (or the next header), streamed to its channel as it comes."""
        i, marker = _first(self._buf, _MARKERS)
        if i < 0:
            keep = max(held_prefix(self._buf, m) for m in _MARKERS)
            self._to(events, self._kind, self._buf[:len(self._buf) - keep])
            self._buf = self._buf[len(self._buf) - keep:]
            return False
        self._to(events, self._kind, self._buf[:i])
        if self._kind == _CALL:
            self._close_call(events, False)
        elif self._kind == _REASONING:  # layout beside the end of reasoning is no content (as after </think>)
            self._reasoning.boundary()
            self._content.boundary()
        self._buf = self._buf[i + len(marker):] if marker in _ENDS else self._buf[i:]
        self._state = _START if marker in _ENDS else _HEADER
        return True

    def _to(self, events: list[Event], kind: str, text: str) -> None:
        if kind == _CALL:
            self._body += text
            if self._announce and text:
                if self._early is None:
                    self._early = EarlyCall(self._count, self._tools)
                events += self._early.update(self._region())
            return
        trim, event = (self._reasoning, ReasoningDelta) if kind == _REASONING else (self._content, ContentDelta)
        out = trim.text(text)
        if out:
            events.append(event(out))

    def _region(self) -> str:
        """The call as the JSON formats write it, so their announcing and cut rules apply."""
        return f'{{"name": {json.dumps(self._name)}, "arguments": {self._body}'

    def _close_call(self, events: list[Event], cut: bool) -> None:
        early, self._early = self._early, None
        calls = self._parse()
        if cut and (cut_off(self._body) or not calls):
            calls = cut_calls(self._region(), self._tools, None if self._count else self._named, early)
        elif early is not None and early.started:
            calls = early.settle(calls, self._region())
        if calls:
            self._emit(events, calls)
        else:  # no call after all: the body is its channel's text
            self._to(events, self._fallback, self._body)
        self._body = ""

    def _parse(self) -> list[ToolCall]:
        body = self._body.strip()
        try:
            values = json_values(body) if body else [{}]
            return [to_call({"name": self._name, "arguments": values[0]}, self._tools)] if values else []
        except Exception:  # noqa: BLE001 - any failure to parse model output means "this is text"
            return []

    def _emit(self, events: list[Event], calls: list[ToolCall]) -> None:
        if calls:
            self._content.boundary()
        for call in calls:
            events.append(ToolCallEvent(self._count, call))
            self._count += 1


def _first(text: str, markers: tuple[str, ...]) -> tuple[int, str]:
    """(where the first of `markers` occurs in text, which one); (-1, "") for none."""
    found = [(i, m) for m in markers if (i := text.find(m)) >= 0]
    return min(found) if found else (-1, "")


def parse(text: str, tools: list[dict] | None) -> list[ToolCall]:
    """The calls in a whole output; ValueError if there are none."""
    stream = Stream(tools, announce=False)
    calls = collect(stream.feed(text) + stream.finish()).tool_calls
    if not calls:
        raise ValueError("no message to a function in the output")
    return calls


_REASONING_KEYS = ("thinking", "reasoning_content", "reasoning")


def history(messages: list[dict], template_source: str = "") -> list[dict]:
    """Chat history as the gpt-oss template reads it (hearth.api.chat_template applies it). The
    template writes only an assistant message's first call and names a tool result after the last
    call written, so a message with several calls becomes one message per call, each followed by its
    result (matched by tool_call_id, else in order): the order the model itself writes them in, as
    `<|call|>` ends its turn. It refuses both content and reasoning beside a call: the content (a
    preamble) is dropped there, as llama.cpp does."""
    out: list[dict] = []
    placed: set[int] = set()
    for i, m in enumerate(messages):
        calls = m.get("tool_calls") if m.get("role") == "assistant" else None
        if i in placed:
            continue
        if not calls:
            out.append(m)
            continue
        if m.get("content") and any(m.get(k) for k in _REASONING_KEYS):
            m = {**m, "content": ""}
        results = []
        for j in range(i + 1, len(messages)):
            if messages[j].get("role") != "tool":
                break
            results.append(j)
        for k, call in enumerate(calls):
            rest = {key: v for key, v in m.items() if key not in _REASONING_KEYS} | {"content": ""}
            out.append({**(m if k == 0 else rest), "tool_calls": [call]})
            j = _result_of(call, messages, [j for j in results if j not in placed])
            if j is not None and len(calls) > 1:
                placed.add(j)
                out.append(messages[j])
    return out


def _result_of(call: dict, messages: list[dict], free: list[int]) -> int | None:
    """The tool message (of those free) that answers `call`: by its id, else the first."""
    mine = [j for j in free if call.get("id") is not None and messages[j].get("tool_call_id") == call.get("id")]
    return (mine or free or [None])[0]
