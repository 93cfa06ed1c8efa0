"""A small model routing tool calls (issue 21, point 3), on the engines: a single-turn request with
tools goes first to the small model (a model of the same pool, so the memory budget counts it),
one attempt under the guard (validated, no retries; one call at most; in `auto` the lazy grammar
and the decline gate, so the model keeps its choice between text and a call). An attempt that
begins in text is stopped at its first word: the small model would not call; a call is judged at
its tool's name and stopped there when it would fall back anyway. The whole attempt is
held back: when hearth.tool_guard.routing accepts its call, that call is replayed to the client as
the answer; otherwise the main model answers as it always did and the client never sees the small
model's tokens. Either way the response's `hearth.router` says what was decided. While the call is
written its confidence so far is watched: the first token that takes it under the threshold decides
the fallback (the whole call's confidence can only be lower), so the attempt is aborted there and
the main model starts at once.

The router of a request: `hearth.router` (a model's name, or false), else its model's configured
one (`hearth serve MAIN --router SMALL`, a models file's `router`)."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace

from hearth.api.choices import Update
from hearth.api.errors import APIError
from hearth.api.extensions import Extensions
from hearth.api.guard_extras import RequestGuard, request_extensions
from hearth.api.tool_layer import ChoicesRequest, build_choices, check_fields
from hearth.api.tools import ToolPlan, plan_tools
from hearth.errors import HearthError
from hearth.tool_guard import triggers_for
from hearth.tool_guard.confidence import CLOSERS, call_spans
from hearth.tool_guard.name_read import NameRead, read_name
from hearth.tool_guard.routing import (Ask, Probe, RouterConfig, RouterReport, early_reason,
                                       fallback_reason, probe_choice, skip_reason)
from hearth.tool_parsers import ContentDelta, ToolCallEvent

Render = Callable[[object, ToolPlan], tuple[str, list[int]]]
"""(a served model, its tool plan) -> the request's prompt for that model (text, ids)."""
PROBE_RETRIES = 0
"""The small model's attempt is validated and coerced, never retried (a retry costs what the main model would)."""
PROBE_MAX_TOKENS = 512
"""A call longer than this is not worth waiting for: the main model answers instead."""
log = logging.getLogger("hearth.router")


async def routed_choices(state, model_field: str | None, ask: Ask, render: Render, req: ChoicesRequest):
    """build_choices (hearth.api.tool_layer), with the router first when the request has one:
    (the choices, the logprobs the client asked for)."""
    config = router_config(state, model_field, req.guard.ext)
    report = source = None
    if config is not None:
        check_fields(state, req)  # the request as the main model takes it: its 400s come first
        report, source = await _route(state, model_field, config, ask, render, req)
        state.metrics.observe_router(req.served.name, report)
    if source is not None:
        return source, None
    source, client_k = build_choices(state, req)
    return (source if report is None else WithRouter(source, report.as_dict())), client_k


def extensions_before_load(state, model_field: str | None, raw, tools: list[dict] | None, n: int = 1) -> Extensions:
    """The request's `hearth` extensions (request_extensions), a router it names among this pool's models: none
    needs the model, so a route reads them before its load (routed_choices reads the router again after it)."""
    ext = request_extensions(raw, state.config.tool_guard, tools, n)
    router_config(state, model_field, ext)
    return ext


def router_config(state, model_field: str | None, ext) -> RouterConfig | None:
    """The request's router: hearth.router over the model's own; None when it has none (or names
    the model itself). An unknown name is a 400 naming it."""
    pool = state.models
    main = pool.resolve(model_field)
    own = main.spec.router
    if ext.router is False or (ext.router is None and own is None):
        return None
    name = ext.router if isinstance(ext.router, str) else own.model
    try:
        small = pool.resolve(name)
    except APIError:
        raise APIError(400, f"hearth.router: unknown model {name!r}; this server serves {pool.ids_text()}",
                       param="hearth.router") from None
    if small is main:
        return None
    threshold = ext.router_threshold
    if threshold is None:
        threshold = own.threshold if own is not None else state.config.router_threshold
    floor = ext.router_tool_floor
    if floor is None:
        floor = own.tool_floor if own is not None else state.config.router_tool_floor
    return RouterConfig(small.spec.name, threshold, floor)


async def _route(state, model_field: str | None, config: RouterConfig, ask: Ask, render: Render,
                 req: ChoicesRequest) -> tuple[RouterReport, object | None]:
    """(what was decided, the replayed answer when the small model's call is accepted)."""
    skip = skip_reason(ask)
    if skip is not None:
        return RouterReport(config.model, config.threshold, "skipped", skip), None
    t0 = time.perf_counter()
    try:
        # the main model stays loaded while the small one loads (or the budget could unload it)
        async with state.models.lease(model_field), state.models.lease(config.model) as small:
            run = await _attempt(state, small, ask, render, req, config, t0)
    except Exception as e:  # the small model could not take it (context, template, ...): the main model answers
        if not isinstance(e, (APIError, HearthError)):
            log.warning("router %s failed; the main model answers", config.model, exc_info=True)
        why = getattr(e, "message", str(e))
        return RouterReport(config.model, config.threshold, "fallback", f"small_failed: {why}",
                            latency_s=time.perf_counter() - t0), None
    probe, source = _probe(run), run.source
    reason = fallback_reason(probe, config.threshold)
    usage = {"prompt_tokens": source.num_prompt_tokens, "cached_tokens": source.num_cached_tokens,
             "completion_tokens": sum(len(u.token_ids) for u in run.updates)}
    report = RouterReport(config.model, config.threshold, "fallback" if reason else "accepted", reason or "",
                          probe.confidence, time.perf_counter() - t0, usage, _name_entry(run), run.lows)
    if reason:
        return report, None
    return report, Replayed(source.request_id, run.updates, {**source.report(0), "router": report.as_dict()},
                            source.num_prompt_tokens, source.num_cached_tokens)


@dataclass(slots=True)
class _Attempt:
    """The small model's attempt, held back."""
    source: object
    updates: list[Update] = field(default_factory=list)
    text: bool = False
    """It began in text (stopped at its first word)."""
    read: NameRead | None = None
    """Its call, read at the tool's name."""
    name_s: float | None = None
    stopped: str | None = None
    """Why it was stopped before its end: at the name (hearth.tool_guard.routing.early_reason), or
    `low_confidence` at the first token that took the call under the threshold."""
    at_name: bool = False
    """It was stopped at the name."""
    lows: list[tuple[float, float]] = field(default_factory=list)
    """(the call's confidence so far, seconds) each time it fell: when any threshold would stop it."""


async def _attempt(state, small, ask: Ask, render: Render, req: ChoicesRequest, config: RouterConfig,
                   t0: float) -> _Attempt:
    """The small model's attempt, stopped at its first word of text, at its call's name when the
    call fails there, or at the first token that takes the call under the threshold."""
    rg = req.guard
    plan = plan_tools(small, rg.tools, probe_choice(ask.tool_choice))
    prompt, ids = render(small, plan)
    guard = RequestGuard(Extensions(replace(rg.ext.tool_guard, mode="guard", max_retries=PROBE_RETRIES)), rg.tools,
                         rg.history)
    # within the small model's room too: its context may be shorter than the one the request was checked against
    cap = max(1, min(req.fields.get("max_tokens") or PROBE_MAX_TOKENS, PROBE_MAX_TOKENS, small.max_model_len - len(ids)))
    fields = {**req.fields, "structured_output": plan.constraint, "logprobs": None, "prompt_logprobs": None,
              "max_tokens": cap, "lora": None}  # the adapters are the main model's
    # one call: the grammar then ends the output after it, so any text is text instead of a call
    probe = replace(req, served=small, plan=plan, prompt=prompt, ids=ids, fields=fields, guard=guard,
                    parallel=False, reprompt=_no_reprompt)
    source, _ = build_choices(state, probe)
    run, stream = _Attempt(source), source.updates()
    try:
        async for _, u in stream:
            run.updates.append(u)
            run.text = _wrote_text(u)
            if run.text or (run.read is None and _judge(run, config, t0)) or _watch(run, config, t0):
                source.abort()
                return run
    finally:
        await stream.aclose()
    run.text = any(_wrote_text(u) for u in run.updates)
    return run


def _judge(run: _Attempt, config: RouterConfig, t0: float) -> bool:
    """Reads the call at its tool's name once decided; True: stop it there."""
    s, trace = run.source.setup, run.source.trace(0)
    run.read = None if trace is None else read_name(trace, triggers_for(s.fmt), list(s.schemas))
    if run.read is None:
        return False
    run.name_s = time.perf_counter() - t0
    run.stopped = early_reason(run.read, config.threshold, s.config.decline_below, s.grammar == "lazy",
                               config.tool_floor)
    run.at_name = run.stopped is not None
    return run.at_name


def _watch(run: _Attempt, config: RouterConfig, t0: float) -> bool:
    """The call's confidence so far: the lowest probability from its opener to the latest token,
    over tokens the whole call's span (hearth.api.guarded) holds too, so a bound on its confidence.
    True: under the threshold, the fallback is decided; stop it now."""
    s, trace = run.source.setup, run.source.trace(0)
    spans = [] if trace is None else call_spans(trace.text, triggers_for(s.fmt), CLOSERS)
    low = trace.min_prob(*spans[0]) if spans else None
    if low is None or (run.lows and low >= run.lows[-1][0]):
        return False
    run.lows.append((low, round(time.perf_counter() - t0, 4)))
    if low >= config.threshold:
        return False
    run.stopped = "low_confidence"
    return True


def _wrote_text(u: Update) -> bool:
    """Words outside a call (a call's opener is held back by the parser until it is one)."""
    return any(isinstance(e, ContentDelta) and e.text.strip() for e in u.events)


def _probe(run: _Attempt) -> Probe:
    """The small model's attempt as the routing decision reads it."""
    guard = run.source.report(0)
    calls = sum(isinstance(e, ToolCallEvent) for u in run.updates for e in u.events)
    declined = any(e.get("kind") == "declined" for e in guard.get("events") or [] if isinstance(e, dict))
    # stopped early: its confidence so far, a bound on the whole call's
    confs = ([run.read.confidence] if run.at_name else [run.lows[-1][0]]) if run.stopped else \
        [c.get("confidence") for c in guard["calls"]]
    return Probe(calls, confs, guard["outcome"] == "ok", run.text, declined, run.stopped)


def _name_entry(run: _Attempt) -> dict | None:
    if run.read is None:
        return None
    r = run.read
    return {"name": r.name, "name_confidence": r.confidence, "opener_prob": r.opener, "tool_prob": r.tool,
            "name_raw": r.first_raw, "name_s": round(run.name_s, 4),
            "stopped": run.at_name}


def _no_reprompt(extra: list[dict]) -> list[int]:
    raise HearthError("the router's attempt is never re-prompted")


class Replayed:
    """The small model's accepted answer, as the choices interface (hearth.api.choices) the routes read."""

    n = 1

    def __init__(self, request_id: str, updates: list[Update], report: dict, prompt_tokens: int, cached_tokens: int):
        self.request_id, self._updates, self._report = request_id, updates, report
        self.num_prompt_tokens, self.num_cached_tokens = prompt_tokens, cached_tokens

    def report(self, i: int) -> dict:
        return self._report

    def abort(self) -> None:
        """Nothing runs: the attempt ended before it was accepted."""

    async def updates(self) -> AsyncIterator[tuple[int, Update]]:
        for u in self._updates:
            yield 0, u


class WithRouter:
    """The main model's choices, their `hearth` field carrying the router's decision."""

    def __init__(self, source, router: dict):
        self._source, self._router = source, router

    def __getattr__(self, name: str):
        return getattr(self._source, name)

    def report(self, i: int) -> dict:
        return {**(self._source.report(i) or {}), "router": self._router}
