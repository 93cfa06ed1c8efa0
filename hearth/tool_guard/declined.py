"""Calls the lazy grammar made against the model's will: once an answer opens a call (`<tool_call>`,
a ```json fence or an object starting `{"name"`), the grammar allows only offered tools' names. When
the model meant a tool nobody offered (BFCL's irrelevance: asked for a triangle's area with only a
BMI tool, it writes `"name": "calculate_triangle_area"`), the grammar bends the name's first token to
an offered one, which the model itself gave almost no probability: at its first token, or where the
model's name parts from every offered one (`get_frequency` asked for with only `get_dominant_trait`
offered: `get` is the model's own, `_dom` the grammar's). Such a call is declined: the
answer from its opener on is the model's own, written again without the grammar (hearth.api.guarded:
the grammar's text would carry arguments the model never wrote), as the server without the guard
returns a call of an unknown tool.

What the gate reads, at each of the name's tokens, is the share of the model's own probability (the
raw one, before the grammar's mask: SamplingParams.raw_logprobs) that went to what the grammar
allowed, raw / masked probability of the sampled token, and it takes the lowest over the name's
tokens. Over the allowed tokens only, a name the grammar leaves one way to go on reads 1 whatever the
model meant; the raw probability alone would read a choice the model was torn on among offered tools
(0.3 each for `get_weather` and `get_wind`, sampled) as bent. A token the grammar forced reads its raw
probability, as the first-token gate read it before (docs/eval-tools.md, 2026-12-06, fourteenth
session: reading the first token alone let `get_...` names through)."""

from __future__ import annotations

import re

from hearth.tool_guard.confidence import TokenTrace

NAME_FLOOR = 0.35
"""Below this share (name_prob), the grammar chose the tool, not the model. Measured on the names'
first tokens of Qwen2.5-Coder-0.5B, BFCL greedy (docs/tool-guard.md): bent names read 0.017-0.262
(the raw probability: the grammar allowed one token), names the model chose 0.535-1.0; 0.35 is about
their geometric middle. A thin margin: re-measured over every name token in docs/eval-tools.md."""
_NAME = re.compile(rb'"name"\s*:\s*"')
NAME_OPENING = r'"name"\s*(?::\s*(?:"[^"\\]*)?)?'
"""What the text before each of a name's tokens ends with, however the tokens split `"name": "`,
the name so far included (up to its closing quote): the rows where the gate needs raw logprobs
(SamplingParams.raw_logprobs_at). The matcher sees its last 16 tokens, so a name longer than about
12 tokens reads its masked probability past that (hearth.sample.grammar.GrammarMatcher.TAIL)."""


def name_start(text: str, start: int, end: int) -> int | None:
    """The byte offset of the first character of the call's name inside byte span [start, end)."""
    m = _NAME.search(text.encode(), start, end)
    return None if m is None else m.end()


def name_end(text: str, at: int, end: int) -> int:
    """The byte offset of the quote that closes the name starting at byte `at` (`end` if none yet)."""
    close = text.encode().find(b'"', at, end)
    return end if close < 0 else close


def name_prob(trace: TokenTrace, span: tuple[int, int]) -> float | None:
    """The lowest share of the model's raw probability that went to what the grammar allowed, over the
    tokens of the call's name (None: no name in the span, or no raw logprob read there)."""
    at = name_start(trace.text, *span)
    return None if at is None else trace.allowed_share(at, max(at + 1, name_end(trace.text, at, span[1])))


def overridden(trace: TokenTrace, span: tuple[int, int], floor: float = NAME_FLOOR) -> float | None:
    """name_prob when it is below `floor` (the grammar picked the tool), else None."""
    p = name_prob(trace, span)
    return p if p is not None and p < floor else None
