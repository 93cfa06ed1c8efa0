"""Where a request meets hearth.tool_guard's request-side parts (issue 20, points 4-7): many tools
ranked down to the relevant ones (the prompt and the grammar hold only those), in mode guard a
sentence asking for one call per thing asked (hearth.tool_guard.parallel_hint), an over-long
conversation compacted (opt-in, before every render and re-prompt), and the `hearth.workflow`
policy that the guard's attempt loop (hearth.api.guarded) reviews each attempt against. What it
does is logged as GuardEvents, reported in the response's `hearth` field (GuardReport.events)."""

from __future__ import annotations

from collections.abc import Callable

from hearth.api.errors import APIError
from hearth.api.extensions import Extensions, parse_extensions
from hearth.errors import PromptTooLongError
from hearth.sampling_params import StructuredOutput
from hearth.tool_guard.compaction import compact
from hearth.tool_guard.guard_event import GuardLog
from hearth.tool_guard.nudge import Verdict
from hearth.tool_guard.parallel_hint import KIND, NAME, parallel_hint, wants_hint, with_system_text
from hearth.tool_guard.tool_rank import called_tools, rank_tools
from hearth.tool_guard.workflow import Workflow, progress, review
from hearth.tool_parsers import ToolCall, ToolParserError, call_constraint
from hearth.tool_parsers.types import tool_function, tool_parameters

Render = Callable[[list[dict]], tuple[str, list[int]]]
"""Template messages -> (prompt text, prompt ids), with the request's tools and template options."""


def answer_room(max_tokens: int | None, max_model_len: int) -> int:
    """Tokens a prompt that is cut to fit (compacted, truncated) leaves for the answer: max_tokens, else
    an eighth of the context, at most 256."""
    return max_tokens if max_tokens is not None else min(256, max_model_len // 8)


def request_extensions(raw, server_guard, tools: list[dict] | None, n: int = 1) -> Extensions:
    """A request's `hearth` extensions checked against its tools (as offered) and n: they need no model, so a
    route reads them before its model loads (a bad one is a 400 with nothing loaded) and hands them to its
    RequestGuard."""
    ext = parse_extensions(raw, server_guard, list(tool_parameters(tools or [])))
    if ext.workflow is not None and n != 1:
        raise APIError(400, f"hearth.workflow: needs n = 1, got {n}", param="hearth.workflow")
    return ext


class RequestGuard:
    """One per request: its checked `hearth` extensions (request_extensions), its tools (ranked), its history
    (template messages as sent) and the log of what was done before generation."""

    def __init__(self, ext: Extensions, tools: list[dict] | None, history: list[dict], tool_choice=None):
        tools = tools or []
        self.ext = ext
        self.log = GuardLog()
        self.history = history
        self.tools = self._rank(tools, tool_choice) if tools else None
        self.instruction: str | None = None
        """The sentence added to every render (prompt_hint)."""

    def prompt_hint(self, plan, parallel: bool) -> None:
        """In mode guard, where the plan has tools and parallel calls are allowed: the sentence asking
        for one call per thing asked, in the plan's call format (hearth.tool_guard.parallel_hint), is
        added to the system message of every render of this request (its re-prompts too: the same
        prefix), and reported as an event. Once per request, after plan_tools."""
        guard = self.ext.tool_guard
        if not wants_hint(guard.mode, guard.parallel_hint, bool(plan.tools), parallel):
            return
        text = parallel_hint(plan.parse_format)
        if text is not None:
            self.instruction = text
            self.log.add(KIND, name=NAME, where="system", text=text)

    def _rank(self, tools: list[dict], tool_choice) -> list[dict]:
        cap = self.ext.tool_cap
        if cap is None or len(tools) <= cap:
            return tools
        keep = set(called_tools(self.history))
        if isinstance(tool_choice, dict):  # a named tool (OpenAI's or Anthropic's shape) stays
            keep.add(str((tool_choice.get("function") or {}).get("name") or tool_choice.get("name")))
        wf = self.ext.workflow
        if wf is not None:
            keep |= {*wf.required, *wf.terminal, *(p.after for p in wf.prerequisites), *(p.tool for p in wf.prerequisites)}
        ranked = rank_tools(tools, self.history, cap, frozenset(keep))
        if len(ranked) < len(tools):
            self.log.add("tools_ranked", offered=len(tools), shown=[tool_function(t)["name"] for t in ranked])
        return ranked

    def fit(self, render: Render, history: list[dict], max_model_len: int, max_tokens: int | None,
            model_context: int | None = None) -> tuple[str, list[int]]:
        """The prompt for `history`; with hearth.compaction, compacted until it fits the context
        with room for max_tokens (else for an eighth of the context, at most 256 tokens).
        model_context: the model's own (ServedModel.model_context), for the error's remedy."""
        if self.instruction is not None:  # in the render: compaction cuts the client's messages, measured with it
            render = _instructed(render, self.instruction)
        prompt, ids = render(history)
        options = self.ext.compaction
        room = answer_room(max_tokens, max_model_len)
        # fits as check_room and the engine have it: prompt + room may fill the context exactly
        if options is None or len(ids) + room <= max_model_len:
            return prompt, ids
        done = compact(history, lambda msgs: len(render(msgs)[1]) + room <= max_model_len, options)
        if done is None:
            too_long = PromptTooLongError(len(ids), max_model_len, model_context)
            raise APIError(400, f"{too_long}; even compacted (hearth.compaction), "
                           "the system prompt, first user message and last steps do not fit",
                           param="messages", code="context_length_exceeded")
        messages, report = done
        prompt, new_ids = render(messages)
        self.log.add("compacted", **report.detail(len(ids), len(new_ids)))
        return prompt, new_ids

    def policy(self, fmt: str | None) -> Policy | None:
        wf = self.ext.workflow
        return None if wf is None or not self.tools else Policy(wf, progress(self.history), self.tools, fmt)


def _instructed(render: Render, text: str) -> Render:
    return lambda msgs: render(with_system_text(msgs, text))


class Policy:
    """hearth.workflow for the guard's attempt loop: a verdict per attempt, at most `max_nudges`
    nudges, the last of a premature answer forcing a call of the missing tools by grammar."""

    def __init__(self, workflow: Workflow, done, tools: list[dict], fmt: str | None):
        self.workflow, self.done, self.tools, self.fmt = workflow, done, tools, fmt

    @property
    def max_nudges(self) -> int:
        return self.workflow.max_nudges

    def verdict(self, calls: list[ToolCall]) -> Verdict | None:
        return review(self.workflow, self.done, calls)

    def forcing(self, verdict: Verdict, level: int) -> StructuredOutput | None:
        if not verdict.force or self.fmt is None or level < self.max_nudges:
            return None
        tools = [t for t in self.tools if tool_function(t)["name"] in verdict.force]
        try:
            return StructuredOutput(grammar=call_constraint(self.fmt, tools, "required").lark())
        except ToolParserError:
            return None
