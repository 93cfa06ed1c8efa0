"""The fixed client loop, the same for every mode: OpenAI chat completions, greedy; the model's
tool calls are executed and their results (or the error, for a call that could not run) fed back
as `tool` messages, at most MAX_STEPS requests per user turn. The mode travels as the per-request
extension `hearth.tool_guard`; the loop itself never changes with it."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from hearth.errors import HearthError
from hearth.evals.bfcl_tools import ToolSet
from hearth.evals.validity import call_errors, looks_like_call

MAX_STEPS = 10
MAX_TOKENS = 512
"""Per request: a few parallel calls fit easily; a model that rambles past it is cut, as any client would."""
MODES = {"bare": "off", "grammar": "grammar", "guard": "guard"}
"""Eval mode -> the server's hearth.tool_guard: `bare` is the parse-only server (`off`), `grammar`
the call grammar alone, `guard` grammar, validation and retries (issue 20)."""
SYNONYMS = {"off": "bare"}
"""Other names of a mode: `off` is what `serve --tool-guard` calls the bare mode."""

Post = Callable[[dict], tuple[int, dict]]


def check_mode(mode: str) -> str:
    """The mode's own name (a synonym resolved), or one line naming the modes."""
    mode = SYNONYMS.get(mode, mode)
    if mode not in MODES:
        names = [m + "".join(f" (or {s})" for s, to in SYNONYMS.items() if to == m) for m in MODES]
        raise HearthError(f"--mode {mode!r}: unknown; modes: {', '.join(names)}")
    return mode


@dataclass(slots=True)
class Exchange:
    """One request and its response, for the report."""
    latency_s: float
    prompt_tokens: int = 0
    completion_tokens: int = 0
    called: bool = False
    """The response carries tool calls, or text that looks like an attempted call."""
    valid: bool = False
    """The response's calls are all valid calls of offered tools (see hearth.evals.validity)."""
    retries: int = 0
    confidence: float | None = None
    """The lowest of the response's calls' confidences, as the guard reports them (None: no call)."""
    router: dict | None = None
    """What a router did (the response's hearth.router): decision, the small model's confidence, its seconds."""
    declined: bool = False
    """The server's guard declined a call it judged the model did not mean (its `hearth.events`)."""
    name_prob: float | None = None
    """The lowest raw probability of a call's first name token the decline gate read (its calls'
    and declined events' `name_prob`; None: it read none)."""


@dataclass(slots=True)
class Reply:
    message: dict
    """The assistant message to put back into the conversation."""
    calls: list[dict] = field(default_factory=list)
    """OpenAI tool_calls."""
    error: str = ""
    """Why there is no reply (the server refused the request)."""


class ChatClient:
    def __init__(self, post: Post, mode: str, max_tokens: int = MAX_TOKENS, decline_below: float | None = None,
                 parallel_hint: bool | None = None):
        """decline_below, parallel_hint: sent as hearth.tool_guard_decline_below and
        hearth.tool_guard_parallel_hint (None: the server's own)."""
        mode = check_mode(mode)
        self.post, self.mode, self.max_tokens = post, mode, max_tokens
        self.extensions = {"tool_guard": MODES[mode]}
        if decline_below is not None:
            self.extensions["tool_guard_decline_below"] = decline_below
        if parallel_hint is not None:
            self.extensions["tool_guard_parallel_hint"] = parallel_hint
        self.exchanges: list[Exchange] = []

    def fresh(self) -> ChatClient:
        """A client asking as this one does, with no exchanges yet: one per item in flight."""
        c = copy.copy(self)
        c.exchanges = []
        return c

    def chat(self, messages: list[dict], toolset: ToolSet) -> Reply:
        body = {"messages": messages, "tools": toolset.tools, "temperature": 0, "max_tokens": self.max_tokens,
                "hearth": self.extensions}
        t0 = time.perf_counter()
        status, resp = self.post(body)
        ex = Exchange(time.perf_counter() - t0)
        self.exchanges.append(ex)
        if status != 200:
            err = resp.get("error") if isinstance(resp, dict) else None
            return Reply({}, error=f"HTTP {status}: {err.get('message') if isinstance(err, dict) else err}")
        ext = resp.get("hearth") if isinstance(resp.get("hearth"), dict) else {}
        router = ext.get("router") if isinstance(ext.get("router"), dict) else None
        ex.router = router
        routed = router is not None and router.get("decision") == "accepted"  # the small model's probe ran
        if ext.get("tool_guard") not in (None, MODES[self.mode]) and not routed:
            raise HearthError(f"asked for mode {self.mode} but the server ran {ext['tool_guard']}")
        retries = ext.get("retries", 0)
        ex.retries = len(retries) if isinstance(retries, list) else int(retries or 0)
        confidences = [c.get("confidence") for c in ext.get("calls") or [] if isinstance(c, dict)]
        ex.confidence = min(confidences) if confidences and None not in confidences else None
        events = ext.get("events") if isinstance(ext.get("events"), list) else []
        ex.declined = any(isinstance(e, dict) and e.get("kind") == "declined" for e in events)
        read = [x.get("name_prob") for x in [*(ext.get("calls") or []), *events] if isinstance(x, dict)]
        ex.name_prob = min((p for p in read if isinstance(p, (int, float))), default=None)
        usage = resp.get("usage") or {}
        ex.prompt_tokens, ex.completion_tokens = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
        msg = resp["choices"][0]["message"]
        calls = msg.get("tool_calls") or []
        ex.called = bool(calls) or looks_like_call(msg.get("content"))
        ex.valid = bool(calls) and not any(call_errors(c, toolset) for c in calls)
        message = {"role": "assistant", "content": msg.get("content") or ""}
        if calls:
            message["tool_calls"] = [{"id": c.get("id") or f"call_{i}", "type": "function", "function": c["function"]}
                                     for i, c in enumerate(calls)]
        return Reply(message, message.get("tool_calls", []))


def decode(call: dict, toolset: ToolSet) -> tuple[str, object]:
    """(BFCL's name, decoded arguments) of one tool call; arguments that are not JSON raise ValueError."""
    fn = call["function"]
    name = toolset.original.get(fn["name"], fn["name"])
    return name, json.loads(fn.get("arguments") or "{}")
