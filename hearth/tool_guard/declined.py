"""Calls the lazy grammar made against the model's will: once an answer opens a call (`<tool_call>`,
a ```json fence or an object starting `{"name"`), the grammar allows only offered tools' names. When
the model meant a tool nobody offered (BFCL's irrelevance: asked for a triangle's area with only a
BMI tool, it writes `"name": "calculate_triangle_area"`), the grammar bends the name's first token to
an offered one, which the model itself gave almost no probability. Such a call is declined: the
answer from its opener on is the model's own, written again without the grammar (hearth.api.guarded:
the grammar's text would carry arguments the model never wrote), as the server without the guard
returns a call of an unknown tool. A misspelled name keeps its first token (`get_wether` -> `get_weather`) and stays a call.

The probability read is the raw one, before the grammar's mask (SamplingParams.raw_logprobs): over
the allowed tokens only, a name the grammar leaves one way to start reads 1 whatever the model meant."""

from __future__ import annotations

import re

from hearth.tool_guard.confidence import TokenTrace

NAME_FLOOR = 0.35
"""Below this raw probability of a name's first token, the grammar chose the tool, not the model.
Measured on Qwen2.5-Coder-0.5B, BFCL greedy (docs/tool-guard.md): bent names read 0.017-0.262,
names the model chose 0.535-1.0; 0.35 is about their geometric middle. A thin margin: re-measure."""
_NAME = re.compile(rb'"name"\s*:\s*"')
NAME_OPENING = r'"name"\s*(?::\s*"?)?'
"""What the text before a name's first token ends with, however the tokens split `"name": "`: the
rows where the gate needs raw logprobs (SamplingParams.raw_logprobs_at)."""


def name_start(text: str, start: int, end: int) -> int | None:
    """The byte offset of the first character of the call's name inside byte span [start, end)."""
    m = _NAME.search(text.encode(), start, end)
    return None if m is None else m.end()


def name_prob(trace: TokenTrace, span: tuple[int, int]) -> float | None:
    """The raw probability of the token that starts the call's name (None: no name in the span)."""
    at = name_start(trace.text, *span)
    return None if at is None else trace.raw_prob(at, at + 1)


def overridden(trace: TokenTrace, span: tuple[int, int], floor: float = NAME_FLOOR) -> float | None:
    """The raw probability of the call's first name token when it is below `floor` (the grammar
    picked the tool), else None."""
    p = name_prob(trace, span)
    return p if p is not None and p < floor else None
