"""A guarded choice's next attempt after a failed one (hearth.api.guarded's attempt loop asks for it):
the failed call resampled first, then re-prompts that feed the error back; a hearth.workflow's broken
rule is answered by a nudge instead."""

from __future__ import annotations

from dataclasses import replace

from hearth.api.errors import APIError
from hearth.errors import HearthError
from hearth.sampling_params import SamplingParams
from hearth.tool_guard import Retry, TokenTrace, call_spans, retry_messages, triggers_for
from hearth.tool_guard.checks import NO_CALL, Checked, Problem
from hearth.tool_guard.confidence import CLOSERS
from hearth.tool_guard.nudge import Verdict, nudge_messages
from hearth.tool_guard.repeats import REPEATED_CALL, repeated


class ChoiceRetries:
    """The retry half of hearth.api.guarded's _Choice, which mixes it in: it reads the choice's setup `s`,
    `report` and `params`, and sets the calls a resample keeps (`_kept`) after those sent (`_sent`)."""

    def _repeats(self, checked: Checked, retry_left: bool) -> None:
        """A clean attempt that makes a call of the last step again where that is useless (its result
        an error, or a loop: repeats.repeated) gets that as its problem, once a request: the re-prompt
        quotes the result; a model that repeats the call after it means it. Only where a re-prompt can
        follow (`retry_left`): else the valid call stands, no problem reported.
        A hearth.workflow's own max_repeats decides instead, when the request has one."""
        s = self.s
        if (not retry_left or s.config.mode != "guard" or s.policy is not None or not s.last_step or not checked.ok
                or self._sent or any(r.reason == REPEATED_CALL for r in self.report.retries)):
            return
        problem = repeated(checked.calls, s.last_step)
        if problem is not None:
            checked.problems.append(problem)

    def _review(self, checked: Checked) -> Verdict | None:
        """hearth.workflow's verdict on an attempt whose calls are clean, as a problem of the attempt."""
        policy = self.s.policy
        if policy is None or not checked.ok:
            return None
        verdict = policy.verdict(checked.calls)
        if verdict is not None:
            at = checked.calls[verdict.call_index] if verdict.call_index is not None else None
            checked.problems.append(Problem(verdict.rule, verdict.why, at))
        return verdict

    def _nudge(self, verdict: Verdict, level: int, said: str, checked: Checked):
        """A re-prompt with the broken rule's reason (hearth.tool_guard.nudge); None: no room for it."""
        s = self.s
        forced = s.policy.forcing(verdict, level)
        self._kept, self.report.calls = [], []
        self.report.retries.append(Retry("nudge", verdict.rule, verdict.why, forced=verdict.force if forced else ()))
        try:
            new_ids = s.reprompt(nudge_messages(verdict, level, said, checked.calls))
        except (APIError, HearthError) as e:
            self.report.retries.pop()
            self.report.notes["retry_stopped"] = getattr(e, "message", str(e))
            return None
        return new_ids, replace(self.params, structured_output=forced or self.params.structured_output,
                                raw_logprobs=False, prompt_logprobs=None)

    def _retry(self, attempt: int, checked: Checked, held: list, trace: TokenTrace, last, ids: list[int],
               params: SamplingParams) -> tuple[list[int], SamplingParams] | None:
        """The next attempt's prompt and params: resample first, then re-prompt; None: no retry possible."""
        s, problem = self.s, checked.problems[0]
        if attempt == 0 and s.forced is not None and problem.kind != REPEATED_CALL:  # a resample writes it again
            before = self._before(problem, held, checked, trace, last)
            if len(self._kept) >= self._sent:  # the resample keeps every call the client has
                self.report.retries.append(Retry("resample", problem.kind, problem.message))
                # the answer's budget counts what it continues from (the longer prompt must still fit)
                room = None if params.max_tokens is None else max(1, params.max_tokens - len(before))
                return ids + before, replace(params, structured_output=s.forced, raw_logprobs=False, max_tokens=room,
                                             prompt_logprobs=None)
            self._kept, self.report.calls = [], []
        if self._sent:  # a re-prompt answers afresh: it would take back the calls the client has
            self.report.notes["retry_stopped"] = f"{self._sent} call(s) already streamed to the client"
            return None
        self._kept, self.report.calls = [], []  # a re-prompt answers afresh
        self.report.retries.append(Retry("reprompt", problem.kind, problem.message))
        try:
            new_ids = s.reprompt(retry_messages(trace.text, problem, list(s.schemas)))
        except (APIError, HearthError) as e:  # the conversation no longer fits: keep what there is
            self.report.retries.pop()
            self.report.notes["retry_stopped"] = getattr(e, "message", str(e))
            if problem.kind == REPEATED_CALL:  # no re-prompt follows: the valid call stands (_repeats)
                checked.problems.remove(problem)
                self.report.validation_errors.remove(problem.message)
            return None
        return new_ids, replace(self.params, raw_logprobs=False, prompt_logprobs=None)

    def _before(self, problem, held: list, checked: Checked, trace: TokenTrace, last) -> list[int]:
        """The tokens the resample continues from: all of a text answer (less its end-of-turn token),
        or what precedes the failed call (the valid calls before it are kept)."""
        self._resumed = None  # all of the text: said before the calls, or a text answer continued
        if problem.kind == NO_CALL:
            ended = last is not None and last.finish_reason == "stop" and not isinstance(last.stop_reason, str)
            return trace.token_ids[:-1] if ended and trace.token_ids else list(trace.token_ids)
        # a leading region's calls are one span: a resample of its later call starts over (keeping its first
        # calls and writing the rest in tags made Qwen2.5-Coder-0.5B repeat one call to max_tokens in an
        # openai-agents loop, tests/server/test_responses_real.py)
        spans = call_spans(trace.text, triggers_for(self.s.fmt), CLOSERS, per_call=False)
        k = next((i for i, c in enumerate(held) if c is problem.call), 0)
        if len(spans) != len(held):  # calls not all at openers: resample from the first
            self._kept, k = [], 0
        else:
            self._kept = checked.calls[:k]
            self.report.calls = [{"id": c.id, "name": c.name, "confidence": trace.min_prob(*spans[i])}
                                 for i, c in enumerate(self._kept)]
        at = spans[k][0] if spans else 0
        self._resumed = trace.prefix_text(at)
        return trace.prefix_tokens(at)
