"""`hearth.compaction: "tiered"`: a conversation that no longer fits the context is compacted instead
of refused. Kept whole: the leading system messages, the first user message and the last
`keep_last` steps (a step is a user message, or an assistant message with the tool results that
answer it). The older steps lose, tier by tier until the prompt fits: long tool results are
shortened, then tool results are dropped (their calls stay), then old reasoning, then whole steps,
oldest first. The caller reports what was done; a conversation whose kept part alone does not fit
is still refused."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from hearth.media.marker import cut_before_marker
from hearth.tool_guard.request_fields import FieldError, check_keys, int_field, kind

_KEYS = ("mode", "keep_last", "shorten_to")
_MODES = ("tiered", "off")
DROPPED_RESULT = "[tool result compacted]"
DROPPED_TURNS = "[earlier turns compacted]"


@dataclass(frozen=True, slots=True)
class Compaction:
    keep_last: int = 4
    """Steps at the end that are never touched."""
    shorten_to: int = 256
    """Characters an old tool result keeps in the first tier."""


@dataclass(slots=True)
class Report:
    tiers: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def detail(self, before: int, after: int) -> dict:
        return {"tiers": self.tiers, **self.counts, "prompt_tokens_before": before, "prompt_tokens_after": after}


def parse_compaction(value, param: str = "hearth.compaction") -> Compaction | None:
    """"tiered" / "off", or {"mode", "keep_last", "shorten_to"}; None when off."""
    where = param if isinstance(value, str) else f"{param}.mode"
    if isinstance(value, str):
        value = {"mode": value}
    check_keys(value, _KEYS, param)
    mode = value.get("mode", "tiered")
    if mode not in _MODES:
        raise FieldError(where, f"must be one of {', '.join(map(repr, _MODES))}, got {mode!r} ({kind(mode)})")
    if mode == "off":
        return None
    return Compaction(int_field(value, "keep_last", 4, param, low=0), int_field(value, "shorten_to", 256, param, low=16))


def compact(messages: list[dict], fits: Callable[[list[dict]], bool], options: Compaction) -> tuple[list[dict], Report] | None:
    """The least compacted messages for which `fits` holds, and what was done; None if none fits."""
    report = Report()
    msgs = [dict(m) for m in messages]
    old = _old_steps(msgs, options.keep_last)
    for name, counted, tier in _TIERS:
        if fits(msgs):
            return msgs, report
        changed = tier(msgs, old, options)
        if changed:
            report.tiers.append(name)
            report.counts[counted] = changed
    if fits(msgs):
        return msgs, report
    return _drop_steps(msgs, old, fits, report)


def _old_steps(msgs: list[dict], keep_last: int) -> list[range]:
    """Index ranges of the steps that may be compacted, oldest first."""
    first_user = next((i for i, m in enumerate(msgs) if m.get("role") == "user"), len(msgs))
    starts = [i for i in range(first_user + 1, len(msgs)) if msgs[i].get("role") != "tool"]
    steps = [range(s, e) for s, e in zip(starts, starts[1:] + [len(msgs)])]
    return steps[:max(0, len(steps) - keep_last)]


def _old(msgs: list[dict], old: list[range], role: str):
    for step in old:
        for i in step:
            if msgs[i].get("role") == role:
                yield msgs[i]


def _shorten_tool_results(msgs: list[dict], old: list[range], options: Compaction) -> int:
    n = 0
    for m in _old(msgs, old, "tool"):
        text = m.get("content") or ""
        if len(text) > options.shorten_to and text != DROPPED_RESULT:
            keep = cut_before_marker(text, options.shorten_to)  # half an image's marker would be text
            m["content"] = f"{text[:keep]} … [{len(text) - keep} characters compacted]"
            n += 1
    return n


def _drop_tool_results(msgs: list[dict], old: list[range], options: Compaction) -> int:
    n = 0
    for m in _old(msgs, old, "tool"):
        if m.get("content") != DROPPED_RESULT:
            m["content"], n = DROPPED_RESULT, n + 1
    return n


def _drop_reasoning(msgs: list[dict], old: list[range], options: Compaction) -> int:
    n = 0
    for m in _old(msgs, old, "assistant"):
        if m.pop("reasoning_content", None):
            n += 1
    return n


# (tier, what its count counts, how), in the order they are tried
_TIERS = (("shorten_tool_results", "tool_results_shortened", _shorten_tool_results),
          ("drop_tool_results", "tool_results_dropped", _drop_tool_results),
          ("drop_reasoning", "reasoning_dropped", _drop_reasoning))


def _drop_steps(msgs: list[dict], old: list[range], fits, report: Report) -> tuple[list[dict], Report] | None:
    """Drop the fewest oldest steps that make it fit (fitting only gets easier with more dropped)."""
    def without(k: int) -> list[dict]:
        if k == 0:
            return msgs
        gone = set(i for step in old[:k] for i in step)
        out = [m for i, m in enumerate(msgs) if i not in gone]
        at = old[0].start
        if 0 < at < len(out) and out[at - 1].get("role") == "user" and out[at].get("role") == "user":
            out.insert(at, {"role": "assistant", "content": DROPPED_TURNS})  # keep user/assistant alternation
        return out
    if not old or not fits(without(len(old))):
        return None
    lo, hi = 1, len(old)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(without(mid)) else (mid + 1, hi)
    report.tiers.append("drop_steps")
    report.counts["messages_dropped"] = sum(len(step) for step in old[:lo])
    return without(lo), report
