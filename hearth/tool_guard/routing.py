"""A small model routing tool calls (issue 21, point 3): the decisions, no engine. A single-turn
request with tools is first answered by the small model, forced to call an offered tool; its call
is the answer when the call is valid and its confidence (the lowest token probability inside it,
hearth.tool_guard.confidence) is at least the threshold; otherwise the main model answers. A
request that needs prose, or that speaks in the main model's token ids, skips the router.
hearth.api.tool_router runs it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hearth.errors import HearthError

DEFAULT_THRESHOLD = 0.5
"""Measured (docs/eval-tools.md, the router's sweep: Qwen2.5-Coder 0.5B -> 1.5B, 50 BFCL items): 0.51x
the 1.5B's median latency at 4 points less accuracy; from ~0.7 on the router is slower than the
main model alone (each fallback pays the small model's attempt first)."""


class RouterError(HearthError):
    """A bad router setting (a threshold outside [0, 1])."""


def check_threshold(value: object, where: str = "--router-threshold") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise RouterError(f"{where}: must be a number in [0, 1], got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class RouterConfig:
    model: str
    """The small model's id (a model of the same server)."""
    threshold: float = DEFAULT_THRESHOLD

    def __post_init__(self) -> None:
        check_threshold(self.threshold)


@dataclass(frozen=True, slots=True)
class Ask:
    """What the router reads from a request, whichever API it came through."""
    tools: list[dict] | None
    tool_choice: str | dict | None
    history: list[dict]
    """Template messages (OpenAI roles), system first if any."""
    n: int = 1
    token_level: bool = False
    """logprobs, logit_bias or stop_token_ids: they speak in the main model's token ids."""
    structured: bool = False
    """A response format (JSON schema) was asked for: the answer is not a call."""
    workflow: bool = False
    """hearth.workflow: a multi-step policy the main model's guard enforces."""
    prefill: bool = False
    """The request continues a final assistant message."""


def _kind(tool_choice) -> str | None:
    return tool_choice.get("type") if isinstance(tool_choice, dict) else tool_choice


def _multi_turn(a: Ask) -> bool:
    roles = [m.get("role") for m in a.history]
    return roles.count("user") != 1 or any(r in ("assistant", "tool") for r in roles)


@dataclass(frozen=True, slots=True)
class Rule:
    reason: str
    applies: Callable


SKIPS = (
    Rule("no_tools", lambda a: not a.tools),
    Rule("tool_choice_none", lambda a: _kind(a.tool_choice) == "none"),
    Rule("multi_turn", _multi_turn),
    Rule("n", lambda a: a.n != 1),
    Rule("token_level", lambda a: a.token_level),
    Rule("response_format", lambda a: a.structured),
    Rule("workflow", lambda a: a.workflow),
    Rule("prefill", lambda a: a.prefill),
)
"""Why a request skips the router (the main model answers as usual), checked in order."""


def skip_reason(ask: Ask) -> str | None:
    return next((r.reason for r in SKIPS if r.applies(ask)), None)


def forced_choice(tool_choice):
    """The small model's tool_choice: `required` semantics, keeping a named tool or an allowed subset."""
    kind = _kind(tool_choice)
    if kind in (None, "auto"):
        return "required"
    if kind == "allowed_tools":
        spec = tool_choice.get("allowed_tools") or {}
        return {**tool_choice, "allowed_tools": {**spec, "mode": "required"}}
    return tool_choice


@dataclass(frozen=True, slots=True)
class Probe:
    """The small model's attempt, as the guard reported it."""
    calls: int
    confidences: list[float | None]
    valid: bool
    """There is a call, and every call names an offered tool with arguments valid against its schema
    (a call of no offered tool comes back as text, not as a call)."""

    @property
    def confidence(self) -> float | None:
        known = [c for c in self.confidences if c is not None]
        return min(known) if known and len(known) == len(self.confidences) else None


FALLBACKS = (
    Rule("invalid_call", lambda p, t: not p.valid),
    Rule("no_call", lambda p, t: p.calls == 0),
    Rule("no_confidence", lambda p, t: p.confidence is None),
    Rule("low_confidence", lambda p, t: p.confidence < t),
)
"""Why the small model's call is not the answer, checked in order; none: accepted."""


def fallback_reason(probe: Probe, threshold: float) -> str | None:
    return next((r.reason for r in FALLBACKS if r.applies(probe, threshold)), None)


@dataclass(slots=True)
class RouterReport:
    """The `router` entry of a response's `hearth` field, and what /metrics counts."""
    model: str
    threshold: float
    decision: str
    """"accepted" (the small model's call is the answer), "fallback" (the main model answered after
    the small one tried) or "skipped" (the request needs the main model)."""
    reason: str = ""
    """Why not accepted: a SKIPS or FALLBACKS reason, or small_failed (its request was refused)."""
    confidence: float | None = None
    latency_s: float = 0.0
    """Seconds the small model's attempt took (a fallback's answer comes after it)."""
    usage: dict = field(default_factory=dict)
    """The small model's prompt, cached and completion tokens."""

    def as_dict(self) -> dict:
        out = {"model": self.model, "decision": self.decision, "threshold": self.threshold,
               "confidence": self.confidence}
        if self.reason:
            out["reason"] = self.reason
        if self.decision != "skipped":
            out |= {"latency_s": round(self.latency_s, 4), **self.usage}
        return out
