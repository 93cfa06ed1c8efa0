"""The reasoning channel: `<think>...</think>` (Qwen3, QwQ, DeepSeek-R1, SmolLM3), or Gemma 4's
`<|channel>thought...<channel|>` (MARKERS).

An output opens reasoning only with an open mark at its very start; `<think>` later in an answer is
just text, so content never waits on a `<` once it has begun. Marks that are special tokens, never
text (Gemma 4's: `anywhere`), are read wherever they come: Gemma 4 writes an empty thought at the end
of an answer at times, or a lone close mark (llama.cpp's parser drops them too). Templates that write `<think>` into
the generation prompt (DeepSeek-R1, QwQ) make the output start inside reasoning, with only
`</think>` to come: `starts_in_reasoning`. A repeated `<think>` at the start is then dropped.
An output that never closes its reasoning is all reasoning, as in vLLM's parsers."""

from __future__ import annotations

import re
from dataclasses import dataclass

from hearth.tool_parsers.holdback import Trim, held_prefix
from hearth.tool_parsers.types import ContentDelta, Event, ReasoningDelta


@dataclass(frozen=True, slots=True)
class Marks:
    """A reasoning channel's open and close marks."""
    open: str
    close: str
    anywhere: bool = False
    """Special tokens, never text: a thought after content goes to reasoning too, a lone close mark nowhere."""


OPEN, CLOSE = "<think>", "</think>"
THINK = Marks(OPEN, CLOSE)
GEMMA_THOUGHT = Marks("<|channel>thought", "<channel|>", anywhere=True)
MARKERS = (GEMMA_THOUGHT, THINK)
"""Each reasoning channel's marks, the first a template writes its own. Only `<think>` is ever opened by a prompt."""
_START, _REASONING, _CONTENT = "start", "reasoning", "content"
# a string literal written after add_generation_prompt that opens <think> without closing it
_OPENS_IN_PROMPT = re.compile(r"""(['"])(?:(?!\1).)*<think>(?:(?!\1|</think>).)*\1""", re.DOTALL)


class StreamingReasoningParser:
    def __init__(self, starts_in_reasoning: bool = False, marks: Marks | None = None):
        """marks: the template's own (reasoning_marks); None reads any of MARKERS at the start."""
        self._starts_in_reasoning = starts_in_reasoning
        self._marks = (marks,) if marks is not None else MARKERS
        self._anywhere = [marks] if marks is not None and marks.anywhere else []  # read after content too
        self._state = _START
        self._close = CLOSE  # the open mark's own close mark
        self._buf = ""
        self._reasoning = Trim(after_boundary=True)
        self._content = Trim()
        self._steps = {_START: self._start, _REASONING: self._think, _CONTENT: self._answer}

    def feed(self, delta: str) -> list[Event]:
        self._buf += delta
        events: list[Event] = []
        while self._steps[self._state](events):
            pass
        return events

    def finish(self) -> list[Event]:
        """End of output: held-back text belongs to the channel it was in."""
        if self._state == _START:
            self._state = _REASONING if self._starts_in_reasoning else _CONTENT
        events: list[Event] = []
        if self._state == _REASONING:
            _emit(events, ReasoningDelta, self._reasoning.text(self._buf))
        else:
            _emit(events, ContentDelta, self._content.text(self._buf))
        self._buf = ""
        _emit(events, ContentDelta, self._content.flush())
        return events

    def _start(self, events: list[Event]) -> bool:
        head = self._buf.lstrip()
        for marks in self._marks:
            if head.startswith(marks.open):
                self._buf, self._state, self._close = head[len(marks.open):], _REASONING, marks.close
                return True
        if any(marks.open.startswith(head) for marks in self._marks):
            return False  # whitespace or a prefix of an open mark: wait
        self._state = _REASONING if self._starts_in_reasoning else _CONTENT
        return True

    def _think(self, events: list[Event]) -> bool:
        i = self._buf.find(self._close)
        if i < 0:
            keep = len(self._buf) - held_prefix(self._buf, self._close)
            _emit(events, ReasoningDelta, self._reasoning.text(self._buf[:keep]))
            self._buf = self._buf[keep:]
            return False
        _emit(events, ReasoningDelta, self._reasoning.text(self._buf[:i]))
        self._reasoning.boundary()
        self._content.boundary()
        self._buf, self._state = self._buf[i + len(self._close):], _CONTENT
        return True

    def _answer(self, events: list[Event]) -> bool:
        anywhere = self._anywhere
        found = [(i, m, mark) for m in anywhere for mark in (m.open, m.close) if (i := self._buf.find(mark)) >= 0]
        if not found:
            keep = max((held_prefix(self._buf, mark) for m in anywhere for mark in (m.open, m.close)), default=0)
            _emit(events, ContentDelta, self._content.text(self._buf[:len(self._buf) - keep]))
            self._buf = self._buf[len(self._buf) - keep:]
            return False
        i, marks, mark = min(found, key=lambda f: f[0])
        _emit(events, ContentDelta, self._content.text(self._buf[:i]))
        self._content.boundary()
        self._buf = self._buf[i + len(mark):]
        if mark == marks.open:  # a thought after content: reasoning again
            self._state, self._close = _REASONING, marks.close
        return True


def _emit(events: list[Event], kind: type, text: str) -> None:
    if text:
        events.append(kind(text))


def split_reasoning(text: str, starts_in_reasoning: bool = False, marks: Marks | None = None) -> tuple[str, str]:
    """A whole output -> (reasoning, content)."""
    parser = StreamingReasoningParser(starts_in_reasoning, marks)
    events = parser.feed(text) + parser.finish()
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    return reasoning, "".join(e.text for e in events if isinstance(e, ContentDelta))


def reasoning_marks(template_source: str | None) -> Marks | None:
    """The reasoning marks a template writes, None where it writes none."""
    return next((m for m in MARKERS if m.open in (template_source or "") or m.close in (template_source or "")), None)


def detect_reasoning(template_source: str | None) -> tuple[bool, bool]:
    """(the template knows a reasoning channel, its generation prompt opens `<think>`).
    From the source alone this is a guess; prompt_opens_reasoning on the rendered prompt is exact."""
    if reasoning_marks(template_source) is None:
        return False, False
    tail = template_source.rsplit("add_generation_prompt", 1)[-1]
    return True, bool(_OPENS_IN_PROMPT.search(tail))


def prompt_opens_reasoning(prompt: str) -> bool:
    """Whether a rendered prompt ends inside `<think>` (so the output starts in reasoning):
    exact per request, e.g. Qwen3 with enable_thinking=False closes it in the prompt."""
    return prompt.rfind(OPEN) > prompt.rfind(CLOSE)
