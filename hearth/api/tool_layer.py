"""Where a request's tools meet the tool guard: the request's `hearth` extensions (checked once, in
hearth.api.guard_extras.RequestGuard) and the server's default pick the mode; `off` (or no tools)
parses one Generation as the server always did (PlainChoices), `grammar` and `guard` run guarded
attempts (hearth.api.guarded) with the lazy call grammar in `auto`; a `hearth.workflow` runs them in
every mode (its nudges are that loop's). Every route with tools builds its choices here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hearth.api.choices import PlainChoices
from hearth.api.guard_extras import RequestGuard
from hearth.api.generate import Generation
from hearth.api.guard_setup import guard_setup
from hearth.api.guarded import GuardedChoices
from hearth.api.parsing import output_parser
from hearth.api.sampling import make_params
from hearth.api.tools import ToolPlan, guard_constraint
from hearth.errors import HearthError
from hearth.tool_guard.declined import NAME_OPENING
from hearth.tool_guard.repeats import last_step


@dataclass(slots=True)
class ChoicesRequest:
    """One request as build_choices takes it, rendered for one served model: each route builds it once
    (the router's attempt is a copy for the small model)."""
    served: object
    plan: ToolPlan
    prompt: str
    ids: list[int]
    fields: dict
    """SamplingParams fields (see hearth.api.sampling.make_params)."""
    field_names: dict | None
    """SamplingParams names -> the wire's names, for error messages."""
    guard: RequestGuard
    parallel: bool
    reprompt: Callable[[list[dict]], list[int]]
    """Extra OpenAI messages -> prompt ids."""
    request_id: str | None = None
    streaming: bool = False
    """The client streams: a call the grammar holds may go out while it is written (hearth.api.guard_stream)."""


def build_choices(state, req: ChoicesRequest) -> tuple[PlainChoices | GuardedChoices, int | None]:
    """(the choices, the logprobs the client asked for)."""
    served, plan, prompt, rg = req.served, req.plan, req.prompt, req.guard
    metrics = state.metrics.of(served.name)
    ext = rg.ext
    policy = rg.policy(plan.parse_format) if plan.tools else None
    guard = ext.tool_guard if plan.tools and (ext.tool_guard.mode != "off" or policy is not None) else None
    lazy = None
    if guard and req.fields["structured_output"] is None:
        lazy = guard_constraint(served, plan, prompt, req.parallel, guard)
    fields = dict(req.fields)
    if lazy is not None:
        fields["structured_output"] = lazy
    client_k = fields.get("logprobs")
    if guard is not None and client_k is None:
        fields["logprobs"] = 0  # the sampled tokens' logprobs: each call's confidence
    if lazy is not None and guard.mode == "guard":
        fields["raw_logprobs"] = True  # the decline gate reads the call name's raw probability,
        fields["raw_logprobs_at"] = NAME_OPENING  # there only: elsewhere a few allowed tokens are all the head scores
    params = make_params(fields, state.limits, served.max_model_len, req.field_names, len(req.ids))
    if guard is None:
        gen = Generation(served.engine, req.ids, params, metrics, request_id=req.request_id)
        return PlainChoices(gen, [output_parser(served, plan, prompt, req.streaming) for _ in range(gen.n)], rg.log.events), client_k
    grammar = "lazy" if lazy else ("forced" if plan.constraint else "none")
    setup = guard_setup(served, metrics, plan, prompt, req.ids, params, guard, client_k is not None, grammar,
                        req.reprompt)
    setup.events, setup.policy, setup.parallel, setup.streaming = rg.log.events, policy, req.parallel, req.streaming
    setup.last_step = last_step(rg.history) if guard.mode == "guard" else []
    if req.request_id:
        setup.request_id = req.request_id
    return GuardedChoices(setup), client_k


def check_fields(state, req: ChoicesRequest) -> None:
    """The main model's checks of the request's sampling fields (max_tokens past its context is a
    400 naming the field): build_choices makes them; a router makes them first, or the small model's
    answer (its own budget, its own context) would hide the error the main model gives."""
    make_params(req.fields, state.limits, req.served.max_model_len, req.field_names, len(req.ids))


def reprompt_ids(served, text: str, max_tokens: int | None, ids: list[int] | None = None) -> list[int]:
    """A re-prompt's rendered text as ids (`ids`: already encoded, with its images' rows); a HearthError
    when no room is left to answer."""
    ids = served.encode_chat_text(text) if ids is None else ids
    if len(ids) + (max_tokens or 1) > served.max_model_len:
        raise HearthError(f"a re-prompt of {len(ids)} tokens would not leave room for the answer")
    return ids
