"""How sure the model was of each call: the lowest probability of a sampled token inside the call,
over what the call grammar allowed (the engine's logprobs: a token the grammar forces reads 1).
Beside it each token's raw probability, before the grammar's mask, where the engine reports it
(SamplingParams.raw_logprobs): what the model itself would have written (hearth.tool_guard.declined).
Tokens are placed on the output's bytes as they arrive; a call's span runs from its opener to its
close (or the next opener); a leading region (a bare, fenced or doubled-brace call opening the
output) holds one span per call the parser reads there."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from hearth.tool_guard.triggers import OPEN_OBJECT, Trigger
from hearth.tool_parsers.lenient_json import leading_values

CLOSERS = ("</tool_call>", "</function>")
"""What ends a tagged call (the span of a call without one runs to the next opener or the end)."""


class TokenTrace:
    """The output so far: its text, (byte start, byte end, logprob) per sampled token, and per token
    its raw logprob (None where the engine reported none)."""

    def __init__(self, token_bytes: Callable[[int], bytes]):
        self._bytes = token_bytes
        self.text = ""
        self.token_ids: list[int] = []
        self.spans: list[tuple[int, int, float | None]] = []
        self.raw: list[float | None] = []
        self._end = 0

    def add(self, text: str, token_ids: list[int], logprobs: list[dict] | None,
            raw: list[float] | None = None) -> None:
        """One engine output: its text, tokens, their logprobs and raw logprobs. When the tokens' bytes
        add up to the text's, each gets its own span; otherwise (special tokens skipped, a fake
        tokenizer) they share the piece's."""
        start, n = self._end, len(text.encode())
        self.text += text
        self._end += n
        lps = [(e or {}).get(t) for t, e in zip(token_ids, logprobs or [None] * len(token_ids))]
        sizes = [len(self._bytes(t)) for t in token_ids]
        exact = sum(sizes) == n
        at = start
        for size, lp in zip(sizes, lps):
            span = (at, at + size) if exact else (start, start + n)
            self.spans.append((*span, lp))
            at += size
        self.token_ids += token_ids
        self.raw += list(raw) if raw is not None else [None] * len(token_ids)

    def prefix_tokens(self, byte_offset: int) -> list[int]:
        """The tokens that end at or before byte_offset (what precedes a call, to resample from)."""
        return [t for t, (_, end, _) in zip(self.token_ids, self.spans) if end <= byte_offset]

    def prefix_text(self, byte_offset: int) -> str:
        """The text of prefix_tokens(byte_offset): what a resample from there continues."""
        end = max((e for _, e, _ in self.spans if e <= byte_offset), default=0)
        return self.text.encode()[:end].decode(errors="ignore")

    def min_prob(self, start: int, end: int) -> float | None:
        """The lowest probability (over what the grammar allowed) of the tokens overlapping [start, end)."""
        lps = [lp for a, b, lp in self.spans if a < end and b > start and lp is not None]
        return round(math.exp(min(lps)), 6) if lps else None

    def raw_prob(self, start: int, end: int) -> float | None:
        """The same before the grammar's mask; a token without a raw logprob counts its masked one."""
        lps = [raw if raw is not None else lp for (a, b, lp), raw in zip(self.spans, self.raw)
               if a < end and b > start and (raw is not None or lp is not None)]
        return float(f"{math.exp(min(lps)):.3g}") if lps else None  # 3 digits: far below 1e-6 still reads

    def allowed_share(self, start: int, end: int) -> float | None:
        """The lowest, over the tokens overlapping [start, end) that have a raw logprob, of the share of
        the raw probability the model gave to what the grammar allowed there: raw / masked probability
        of the sampled token (1: the grammar removed nothing the model wanted; a token the grammar
        forced against the model reads about its raw probability; a choice among allowed tokens, however
        torn, reads the allowed tokens' whole share)."""
        gaps = [min(raw - lp, 0.0) for (a, b, lp), raw in zip(self.spans, self.raw)
                if a < end and b > start and raw is not None and lp is not None]
        return float(f"{math.exp(min(gaps)):.3g}") if gaps else None


def call_spans(text: str, triggers: list[Trigger], closers: tuple[str, ...],
               per_call: bool = True) -> list[tuple[int, int]]:
    """Byte spans of the calls in an output, in order: from each opener to its closer; a leading
    region is cut before each further call it holds (`{{"name": ...}}}\n{{"name": ...}}}`: the
    parser reads both, and each call's name is read in its own span: hearth.tool_guard.declined),
    unless per_call is False (one span per region: where a resample may start)."""
    found = openers(text, triggers)
    spans = []
    for k, (s, trigger) in enumerate(found):
        stop = found[k + 1][0] if k + 1 < len(found) else len(text)
        ends = [text.find(c, s, stop) for c in closers]
        e = min((x + len(c) for x, c in zip(ends, closers) if x >= 0), default=stop)
        cuts = _later_calls(text, s, e) if per_call and trigger.at_start and trigger.body == OPEN_OBJECT else []
        bounds = [s, *cuts, e]
        spans += [(len(text[:a].encode()), len(text[:b].encode())) for a, b in zip(bounds, bounds[1:])]
    return spans


_GAP = re.compile(r"(?:[ \t\n]*```json)?[ \t\n]*$")
"""What goes before a further call in a leading region: its fence's opener and the layout (the call's span)."""


def _later_calls(text: str, start: int, end: int) -> list[int]:
    """Character offsets where the values after the first begin in a leading region [start, end),
    their fence and layout included: the values the parser reads as calls there (leading_values: bare
    or fenced, one after another; a nested "name" key or text after them starts none)."""
    region, out, at = text[start:end], [], 0
    for k, value in enumerate(leading_values(region)):
        at = region.find(value, at)
        if k:
            out.append(start + at - len(_GAP.search(region[:at]).group()))
        at += len(value)
    return out


def openers(text: str, triggers: list[Trigger]) -> list[tuple[int, Trigger]]:
    """(character offset, trigger) of each call opener in an output, in order; where two triggers
    match at one offset, the first listed."""
    found: dict[int, Trigger] = {}
    for t in triggers:
        for m in _matches(t, text):
            found.setdefault(m.start(), t)
    return sorted(found.items(), key=lambda item: item[0])


def _matches(t: Trigger, text: str):
    if t.at_start:
        m = t.search(text)
        return [m] if m else []
    out, pos = [], 0
    while (m := t.search(text, pos)) is not None:
        out.append(m)
        pos = m.end()
    return out
