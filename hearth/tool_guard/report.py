"""What the layer did for one choice: the `hearth` extension field of a response, and what the
Prometheus counters count. The request-side parts add their GuardEvents (rescued, compacted,
tools_ranked) to `events`; a workflow nudge is a retry of kind "nudge"."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hearth.tool_guard.guard_event import GuardEvent


@dataclass(frozen=True, slots=True)
class Retry:
    kind: str
    """"resample" (the call again under the forced grammar, after the text before it),
    "reprompt" (the error fed back in the tool channel) or "nudge" (a hearth.workflow rule broken:
    the reason fed back, firmer each time)."""
    reason: str
    """The problem kind: unknown_tool, invalid_arguments, no_call, repeated_call (the last step's call
    again: hearth.tool_guard.repeats); for a nudge the workflow rule
    (premature_answer, missing_prerequisite, repeated_call, after_terminal)."""
    error: str
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    forced: tuple[str, ...] = ()
    """A nudge whose attempt a grammar forced to call one of these tools (the last nudge)."""

    def as_dict(self) -> dict:
        out = {"kind": self.kind, "reason": self.reason, "error": self.error, "prompt_tokens": self.prompt_tokens,
               "cached_tokens": self.cached_tokens, "completion_tokens": self.completion_tokens}
        return out | ({"forced": list(self.forced)} if self.forced else {})


@dataclass(slots=True)
class GuardReport:
    mode: str
    grammar: str = "none"
    """"lazy" (free until a call starts), "forced" (a call from the first token) or "none"."""
    triggered: bool = False
    """The output (the last attempt) started a call, so the grammar constrained it; true too when that
    call was then declined (the answer rewritten without the grammar from its opener on)."""
    retries: list[Retry] = field(default_factory=list)
    coercions: list[dict] = field(default_factory=list)
    validation_errors: list[str] = field(default_factory=list)
    """Every problem found, in every attempt, in order."""
    calls: list[dict] = field(default_factory=list)
    """Per returned call: id, name and confidence."""
    outcome: str = "ok"
    """"ok", or "unresolved": problems remain (retries ran out, or the mode has none) and the last
    attempt is returned as it parsed."""
    events: list[GuardEvent] = field(default_factory=list)
    """What the request-side parts did: the request's (tools_ranked, compacted), then this
    choice's (rescued)."""
    notes: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"tool_guard": self.mode, "grammar": self.grammar, "grammar_triggered": self.triggered,
                "retries": [r.as_dict() for r in self.retries], "coercions": self.coercions,
                "validation_errors": self.validation_errors, "calls": self.calls, "outcome": self.outcome,
                "events": [e.to_json() for e in self.events], **self.notes}
