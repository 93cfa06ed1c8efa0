"""A small model routing tool calls (issue 21, point 3): the decisions, no engine. A single-turn
request with tools is first answered by the small model, as freely as the client allows: in
`tool_choice: auto` it keeps its own choice between text and a call (the guard's lazy grammar, so a
call it begins is held to an offered tool's schema, and the decline gate drops a tool the grammar
picked for it); `required` or a named tool forces a call. Its answer stands when it is a valid call
whose confidence (the lowest token probability from the call's opener to its end,
hearth.tool_guard.confidence: the opener's own probability, unmasked, is the model's intent to call)
is at least the threshold. The call is judged first at its tool's name (hearth.tool_guard.name_read:
the opener's and the name's probabilities, and the decline gate's reading of the name's first
token): a call that fails there is stopped before its arguments are written, since the whole call's
confidence can only be lower; past the name, the first token that takes the call's confidence so far
under the threshold stops it there, for the same reason (the routing decision is the one the whole
call would get). When it begins in text (it would not call: the request needs prose or no
tool fits) the attempt stops there and the main model answers, as it does for any other fallback.
A request that needs prose, or that speaks in the main model's token ids, skips the router.
hearth.api.tool_router runs it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hearth.errors import HearthError
from hearth.tool_guard.name_read import NameRead

DEFAULT_THRESHOLD = 0.3
"""Chosen on one BFCL sample and checked on a disjoint one (docs/eval-tools.md, "the small model's
intent to call" and "judged at its tool's name": Qwen2.5-Coder 0.5B -> 1.5B, 100 single-turn items):
without the tool floor 39% against the 1.5B's 41% at 0.42-0.44x its median latency; from ~0.6 on the
router is slower than the main model alone (each fallback pays the small model's attempt first)."""
TOOL_FLOOR = 0.0
"""Off by default (hearth.router_tool_floor per request, or a RouterConfig's tool_floor, sets it):
below a floor, the probability of the tokens that chose among the offered tools' names (over the
names the grammar allowed) says the small model was unsure which tool, and the main model answers.
0.95 was picked on one BFCL sample (docs/eval-tools.md, "judged at its tool's name"): on `multiple`
the 0.5B's right picks read >= 0.98 but one (0.79), its wrong ones 0.76-0.87, while the call's
confidence, set by its opener, did not separate them. On the held-out sample it fixed `multiple`
(100 items: 41% against the 1.5B's 41%) but also sent `parallel_multiple` requests, where the 0.5B
is torn because several tools are due, to the main model: 0.64x its latency there, past the 0.5x
the router is for; without it 39% against 41% at 0.42-0.44x. With one tool offered there is no
choice to read."""


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
    tool_floor: float = TOOL_FLOOR
    """A call whose choice of tool read below this is stopped at its name (0: never)."""

    def __post_init__(self) -> None:
        check_threshold(self.threshold)
        check_threshold(self.tool_floor, "tool floor")


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


def probe_choice(tool_choice):
    """The small model's tool_choice: the client's own (absent: `auto`, the model's own choice
    between text and a call, which is what tells the router that no call is due)."""
    return "auto" if tool_choice is None else tool_choice


@dataclass(frozen=True, slots=True)
class Probe:
    """The small model's attempt, as the guard reported it."""
    calls: int
    confidences: list[float | None]
    valid: bool
    """Every call names an offered tool with arguments valid against its schema (a call of no
    offered tool comes back as text, not as a call)."""
    text: bool = False
    """It answered (or began to answer) in text and made no call: it would not call."""
    declined: bool = False
    """The guard's decline gate dropped its call: the grammar chose the tool, not the model
    (hearth.tool_guard.declined)."""
    stopped: str | None = None
    """The reason it was stopped at its tool's name (early_reason), before the call was written."""

    @property
    def confidence(self) -> float | None:
        known = [c for c in self.confidences if c is not None]
        return min(known) if known and len(known) == len(self.confidences) else None


def early_reason(read: NameRead, threshold: float, decline_below: float, lazy: bool,
                 tool_floor: float = TOOL_FLOOR) -> str | None:
    """Why a call is given up at its tool's name (None: let it finish): the decline gate's verdict
    (`auto`'s lazy grammar only) or a confidence already below the threshold, the verdicts the
    whole call would get, sooner; or a choice of tool below the tool floor."""
    if lazy and read.first_raw is not None and read.first_raw < decline_below:
        return "declined"
    if read.confidence is not None and read.confidence < threshold:
        return "low_confidence"
    if read.tool is not None and read.tool < tool_floor:
        return "unsure_tool"
    return None


FALLBACKS = (
    Rule("declined", lambda p, t: p.declined and p.calls == 0),
    Rule("invalid_call", lambda p, t: not p.valid),
    Rule("text", lambda p, t: p.text and p.calls == 0),
    Rule("no_call", lambda p, t: p.calls == 0),
    Rule("no_confidence", lambda p, t: p.confidence is None),
    Rule("low_confidence", lambda p, t: p.confidence < t),
)
"""Why the small model's answer is not the answer, checked in order; none: accepted."""


def fallback_reason(probe: Probe, threshold: float) -> str | None:
    if probe.stopped is not None:  # judged at the name: the rest of the call was never written
        return probe.stopped
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
    name: dict | None = None
    """Its call read at the tool's name (hearth.tool_guard.name_read): name (the tool),
    name_confidence, its parts opener_prob and tool_prob, name_raw (the decline gate's reading),
    name_s (seconds to it), stopped (whether the attempt ended there); None: no call reached a name."""
    lows: list = field(default_factory=list)
    """(the call's confidence so far, seconds) each time it fell while written: the attempt stops at
    the first under the threshold, and a sweep reads when any other threshold would have."""

    def as_dict(self) -> dict:
        out = {"model": self.model, "decision": self.decision, "threshold": self.threshold,
               "confidence": self.confidence}
        if self.reason:
            out["reason"] = self.reason
        if self.decision != "skipped":
            out |= {"latency_s": round(self.latency_s, 4), **self.usage, **(self.name or {})}
            if self.lows:
                out["lows"] = [list(x) for x in self.lows]
        return out
