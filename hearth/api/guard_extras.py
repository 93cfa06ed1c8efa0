"""Where a request meets hearth.tool_guard's request-side parts (issue 20, points 4-7): the `hearth`
extension object checked (a 400 naming the field), many tools ranked down to the relevant ones,
an over-long conversation compacted (opt-in), calls rescued from text, and the output reviewed
against `hearth.workflow` or a forced tool_choice, with bounded nudges inside the request.
Everything it does is logged as GuardEvents for the response's `hearth` field."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from hearth.api.errors import APIError
from hearth.errors import PromptTooLongError
from hearth.sampling_params import StructuredOutput
from hearth.tool_guard.compaction import compact
from hearth.tool_guard.extensions import GUARD, parse_extensions
from hearth.tool_guard.guard_event import GuardLog
from hearth.tool_guard.nudge import Verdict, call_required, nudge_messages
from hearth.tool_guard.request_fields import FieldError
from hearth.tool_guard.rescue_parser import RescuingParser
from hearth.tool_guard.tool_rank import called_tools, rank_tools
from hearth.tool_guard.workflow import progress, review
from hearth.tool_parsers import ToolCall, ToolParserError, call_constraint, forced_tools
from hearth.tool_parsers.types import tool_function, tool_parameters

Render = Callable[[list[dict]], tuple[str, list[int]]]
"""Template messages -> (prompt text, prompt ids), with the request's tools and template options."""


class RequestGuard:
    """One per request. `tools` in OpenAI's shape; `history` the template messages as sent."""

    def __init__(self, value, tools: list[dict], history: list[dict], tool_choice=None, n: int = 1,
                 default_mode: str = GUARD):
        """`default_mode`: the server's --tool-guard, for a request that sends no hearth.tool_guard."""
        try:
            self.ext = parse_extensions(value, list(tool_parameters(tools)), default_mode=default_mode)
        except FieldError as e:
            raise APIError(400, str(e), param=e.param) from None
        if self.ext.workflow is not None and n != 1:
            raise APIError(400, f"hearth.workflow: needs n = 1, got {n}", param="hearth.workflow")
        self.log = GuardLog()
        self.history = history
        self.tools = self._rank(tools, tool_choice)
        try:
            review = self.tools and self.ext.automatic and n == 1  # a review judges one choice
            self.forced = forced_tools(self.tools, tool_choice) if review else None
        except ToolParserError:
            self.forced = None  # plan_tools answers a choice naming no tool with its own 400
        self.nudges = 0

    def _rank(self, tools: list[dict], tool_choice) -> list[dict]:
        keep = set(called_tools(self.history))
        if isinstance(tool_choice, dict):
            keep.add(str((tool_choice.get("function") or {}).get("name") or tool_choice.get("name")))
        wf = self.ext.workflow
        if wf is not None:
            keep |= {*wf.required, *wf.terminal, *(p.after for p in wf.prerequisites), *(p.tool for p in wf.prerequisites)}
        if self.ext.tool_cap is None:
            return tools
        ranked = rank_tools(tools, self.history, self.ext.tool_cap, frozenset(keep))
        if len(ranked) < len(tools):
            self.log.add("tools_ranked", offered=len(tools), shown=[tool_function(t)["name"] for t in ranked])
        return ranked

    def fit(self, render: Render, history: list[dict], max_model_len: int, max_tokens: int | None) -> tuple[str, list[int]]:
        """The prompt for `history`; with hearth.compaction, compacted until it fits the context
        with room for max_tokens (else for an eighth of the context, at most 256 tokens)."""
        prompt, ids = render(history)
        options = self.ext.compaction
        room = max_tokens if max_tokens is not None else min(256, max_model_len // 8)
        if options is None or len(ids) + room < max_model_len:
            return prompt, ids
        done = compact(history, lambda msgs: len(render(msgs)[1]) + room < max_model_len, options)
        if done is None:
            raise APIError(400, f"{PromptTooLongError(len(ids), max_model_len)}; even compacted (hearth.compaction), "
                           "the system prompt, first user message and last steps do not fit",
                           param="messages", code="context_length_exceeded")
        messages, report = done
        prompt, new_ids = render(messages)
        self.log.add("compacted", **report.detail(len(ids), len(new_ids)))
        return prompt, new_ids

    def parser(self, parser, tools: list[dict] | None):
        """The output parser, rescuing calls written without the format's markers."""
        return RescuingParser(parser, tools, self.log) if tools and self.ext.automatic else parser

    def constrained(self, grammar) -> None:
        """The plan's grammar (if any) already forces the call tool_choice asks for: no nudge for it."""
        if grammar is not None:
            self.forced = None

    @property
    def reviews(self) -> bool:
        """Whether outputs are reviewed (and so answered whole: a nudge needs the whole output)."""
        return self.ext.workflow is not None or bool(self.forced)

    def verdict(self, calls: list[ToolCall]) -> Verdict | None:
        wf = self.ext.workflow
        if wf is not None:
            found = review(wf, progress(self.history), calls)
            if found is not None:
                return found
        return call_required(self.forced, calls)

    def max_nudges(self, verdict: Verdict) -> int:
        return 1 if verdict.rule == "call_required" else self.ext.workflow.max_nudges

    def forcing(self, verdict: Verdict, fmt: str | None) -> StructuredOutput | None:
        """The last nudge of a premature answer may force a call of the missing tools by grammar."""
        if not verdict.force or fmt is None or self.nudges < self.max_nudges(verdict):
            return None
        tools = [t for t in self.tools if tool_function(t)["name"] in verdict.force]
        try:
            return StructuredOutput(grammar=call_constraint(fmt, tools, "required").lark())
        except ToolParserError:
            return None


Attempt = Callable[[list[dict], StructuredOutput | None], Awaitable[tuple[dict, str, list[ToolCall]]]]
"""(history, forced grammar or None) -> (response body, its content, its calls): one generation."""


async def reviewed(guard: RequestGuard, attempt: Attempt, fmt: str | None) -> list[dict]:
    """Generate, review, nudge and generate again while the output breaks a rule, at most the
    policy's nudges; the bodies of every attempt, the last one the answer."""
    history, grammar, bodies = guard.history, None, []
    while True:
        body, content, calls = await attempt(history, grammar)
        bodies.append(body)
        verdict = guard.verdict(calls)
        if verdict is None:
            return bodies
        if guard.nudges >= guard.max_nudges(verdict):
            guard.log.add("nudges_exhausted", rule=verdict.rule, nudges=guard.nudges)
            return bodies
        guard.nudges += 1
        grammar = guard.forcing(verdict, fmt)
        guard.log.add("nudged", rule=verdict.rule, level=guard.nudges, why=verdict.why,
                      **({"forced": list(verdict.force)} if grammar else {}))
        history = history + nudge_messages(verdict, guard.nudges, content, calls)
