"""The tool guard's attempts for each choice of a chat completion (the decisions are
hearth.tool_guard's; this runs them on the engine).

An attempt streams its text as it comes and holds its calls back, but for the calls the grammar
holds, which stream as they are written (hearth.api.guard_stream; no retry ever takes one back: a
resample keeps them, a re-prompt is not made after one). When it ends, its calls are checked
against the callable tools' schemas (safe coercions applied). A clean attempt ends the choice; a
failed one is retried within the request: first the call alone, resampled under the
forced call grammar after the text that preceded it (the prompt plus that text: a prefix-cache hit),
then re-prompts that feed the error back in the tool channel (the conversation so far is again a
cached prefix). A `hearth.workflow` policy then reviews the attempt's calls (none: a final answer):
a broken rule is a problem too, answered by a nudge (a re-prompt with the rule's reason, firmer each
time; the last one of a premature answer forces a call of the missing tools), at most the policy's
max_nudges, apart from the retries. In guard mode the parser rescues calls written without the
format's markers when it found none (hearth.tool_guard.rescue_parser), and those are checked as any
other. When retries run out, the last attempt is returned as it parsed. Never a 500.

What the route hands it is hearth.api.guard_setup's; how the next attempt is made, hearth.api.guard_retry's."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

from hearth.api.choices import Update
from hearth.api.generate import Generation, check_fits, interleave
from hearth.api.guard_retry import ChoiceRetries
from hearth.api.guard_setup import GuardSetup
from hearth.api.guard_stream import CallStream, StreamRules, as_sent
from hearth.sample.grammar import GrammarStopped
from hearth.sampling_params import SamplingParams
from hearth.tool_guard import GuardReport, TokenTrace, call_spans, check_calls, triggers_for
from hearth.tool_guard.checks import Checked
from hearth.tool_guard.confidence import CLOSERS
from hearth.tool_guard.declined import name_prob, overridden
from hearth.tool_guard.guard_event import GuardLog
from hearth.tool_parsers import ContentDelta, ReasoningDelta, ToolCallEvent

NO_RETRY_FINISH = ("length", "abort")
"""A call cut by max_tokens would be cut again: reported, not retried."""


class GuardedChoices:
    """The PlainChoices interface (hearth.api.choices) over guarded attempts, n choices."""

    def __init__(self, setup: GuardSetup):
        self.setup = setup
        self.request_id = setup.request_id
        p = setup.params
        check_fits(setup.engine, 1, p.n)  # its choices are n requests of n = 1 each
        self.choices: list[_Choice] = []
        # between an attempt and its retry no engine request of ours is in flight: the model must stay loaded
        self._release = setup.holds.take() if setup.holds is not None else _no_hold
        try:  # the first attempts are queued now: a prompt the engine refuses is the request's error
            for j in range(p.n):
                # the request's prompt logprobs: its first choice's first attempt scores them, once
                self.choices.append(_Choice(setup, j, replace(p, n=1, seed=None if p.seed is None else p.seed + j,
                                                              prompt_logprobs=p.prompt_logprobs if j == 0 else None)))
        except BaseException:
            self.abort()
            raise

    @property
    def n(self) -> int:
        return len(self.choices)

    @property
    def num_prompt_tokens(self) -> int:
        """The request's prompt once (OpenAI's and vLLM's count for n > 1), plus every choice's retries."""
        return sum(c.prompt_tokens - (c.first.num_prompt_tokens if j else 0) for j, c in enumerate(self.choices))

    @property
    def num_cached_tokens(self) -> int:
        return sum(c.cached_tokens - (c.first.num_cached_tokens if j else 0) for j, c in enumerate(self.choices))

    def report(self, i: int) -> dict:
        return self.choices[i].report.as_dict()

    def trace(self, i: int) -> TokenTrace | None:
        """Choice i's current attempt so far, as the guard reads it (None before its first output)."""
        return self.choices[i].trace

    def abort(self) -> None:
        for c in self.choices:
            c.abort()
        self._release()

    async def updates(self) -> AsyncIterator[tuple[int, Update]]:
        try:
            async for i, u in interleave([c.run() for c in self.choices]):
                yield i, u
        finally:
            self.abort()


class _Choice(ChoiceRetries):
    def __init__(self, setup: GuardSetup, index: int, params: SamplingParams):
        self.s, self.index, self.params = setup, index, params
        self.report = GuardReport(setup.config.mode, setup.grammar)
        self._log = GuardLog()  # this choice's rescues
        self._done = [0, 0]  # prompt and cached tokens of the attempts that ended
        self._kept: list = []  # valid calls before a resampled one: the resample writes only the rest
        self._resumed: str | None = None  # the text a resample continues from (None: all the attempt said)
        self._gen = self._start(setup.prompt_ids, params, 0)
        self.first = self._gen  # the request's prompt: counted once per request, not per choice
        self._counted = False
        self._name_probs: dict[str, float | None] = {}  # call id -> its name's raw first-token probability
        self._sent = 0  # calls the client has had while they were written (the first ones): never retried away
        self.trace: TokenTrace | None = None

    def _start(self, ids: list[int], params: SamplingParams, attempt: int) -> Generation:
        s = self.s
        return Generation(s.engine, ids, params, s.metrics, request_id=f"{s.request_id}-{self.index}-{attempt}")

    @property
    def prompt_tokens(self) -> int:
        return self._done[0] + (self._gen.num_prompt_tokens if not self._counted else 0)

    @property
    def cached_tokens(self) -> int:
        return self._done[1] + (self._gen.num_cached_tokens if not self._counted else 0)

    def abort(self) -> None:
        self._gen.abort()

    async def run(self) -> AsyncIterator[Update]:
        s, ids, params = self.s, self.s.prompt_ids, self.params
        attempt, nudges, before, restarted = 0, 0, [], False  # before: text of the attempts this one continues
        hold = s.policy is not None  # a reviewed answer is shown once reviewed: a nudge may supersede it
        while True:
            trace, held, last, passed, said, shown = TokenTrace(s.token_bytes), [], None, [], [], []
            self.trace = trace
            parser = s.make_parser(self._log, s.streaming)
            if attempt:
                self._gen, self._counted = self._start(ids, params, attempt), False
            stream = CallStream(self._rules(params, hold), trace)
            try:
                async for _, out in self._gen.outputs():
                    trace.add(out.new_text, out.new_token_ids, out.new_logprobs, out.new_raw_logprobs)
                    events = parser.feed(out.new_text) + (parser.finish(out.finish_reason == "length") if out.finished else [])
                    passed = stream.events(events)
                    held += [e.call for e in events if isinstance(e, ToolCallEvent)]
                    said += [e.text for e in passed if isinstance(e, ContentDelta)]
                    last, shown = out, shown + passed
                    yield Update([] if hold else passed, out.new_token_ids, self._logprobs(out),
                                 prompt_logprobs=out.prompt_logprobs, prompt_ranks=out.prompt_ranks)
            except GrammarStopped as e:  # the call grammar hearth built from the tools, not the client's
                raise GrammarStopped(f"the call grammar of these tools: {e} (fewer or simpler tools fit)", "tools") from e
            self._count(trace)
            self._sent += stream.count
            checked = as_sent(check_calls(held, s.schemas, s.required), held, stream.count)
            cut = last is not None and last.finish_reason in NO_RETRY_FINISH
            self._repeats(checked, not cut and attempt - nudges < s.config.retries)
            verdict = self._review(checked)
            self._note(checked)
            if verdict is not None:
                nxt = None if cut or nudges == s.policy.max_nudges else self._nudge(verdict, nudges + 1, "".join(said), checked)
                nudges += nxt is not None
            else:
                done = checked.ok or cut or attempt - nudges == s.config.retries
                nxt = None if done else self._retry(attempt - nudges, checked, held, trace, last, ids, params)
            calls, spans, gone = self._calls(held, checked), call_spans(trace.text, triggers_for(s.fmt), CLOSERS), []
            if nxt is None:
                gone = self._declined(calls, spans, trace)
            if not gone:  # the gated call stays (or is retried): the text the stream held after it goes too
                late = stream.release()
                said += [e.text for e in late if isinstance(e, ContentDelta)]
                shown += late
                if late and not hold:
                    yield Update(late)
            if nxt is None:
                rewrite = _Rewrite()
                if gone:  # the model's own answer from the first declined call's opener on
                    async for u in self._rewrite(ids, params, trace, spans[gone[0]][0], attempt + 1, hold, rewrite):
                        yield u
                    last = rewrite.last or last
                rescue = getattr(parser, "rescue", None)
                text = "".join(before) + (rescue.content if rescue is not None else "".join(said))
                if hold:  # what was held back: the reasoning, then the text as a whole answer reads
                    text += rewrite.text
                    shown = [e for e in shown if isinstance(e, ReasoningDelta)] + ([ContentDelta(text)] if text else [])
                    yield self._final(held, checked, trace, last, None, calls, spans, gone, shown)
                else:
                    text = text + rewrite.text if restarted or rescue is not None else None
                    yield self._final(held, checked, trace, last, text, calls, spans, gone)
                return
            ids, params = nxt
            attempt += 1
            if self.report.retries[-1].kind == "resample":  # the resample continues this attempt's text
                kept = _kept_content(said, self._resumed) if getattr(parser, "rescue", None) is not None else None
                before += said if kept is None else [kept]
                restarted = restarted or kept is not None  # a whole answer drops the text it wrote again
            else:  # a re-prompt or nudge answers afresh: a whole answer keeps only the new text
                before, restarted = [], True

    def _rules(self, params: SamplingParams, hold: bool) -> StreamRules:
        """What this attempt's calls may stream under (hearth.api.guard_stream)."""
        s, kept = self.s, len(self._kept)
        grammar = "forced" if params.structured_output is s.forced and s.forced is not None else s.grammar
        validated = s.config.mode == "guard"
        cut = validated and bool(params.stop or params.stop_token_ids)  # a stop may end a call early
        first_lazy = validated and grammar == "lazy" and not s.required and not self.report.retries and not kept
        open_ = s.streaming and not hold and not cut and self._sent == kept
        return StreamRules(open_, validated, grammar, s.parallel, s.fmt, s.held,
                           s.config.decline_below if first_lazy else None, kept)

    def _count(self, trace: TokenTrace) -> None:
        gen = self._gen
        self._done[0] += gen.num_prompt_tokens
        self._done[1] += gen.num_cached_tokens
        self._counted = True
        if self.report.retries:
            r = self.report.retries[-1]
            self.report.retries[-1] = replace(r, prompt_tokens=gen.num_prompt_tokens, cached_tokens=gen.num_cached_tokens,
                                              completion_tokens=len(trace.token_ids))

    def _note(self, checked: Checked) -> None:
        self.report.validation_errors += [p.message for p in checked.problems]
        if self.s.config.mode == "guard":  # the grammar alone changes nothing: no coercions to report
            self.report.coercions += [{"call": checked.calls[i].name, **c.as_dict()} for i, c in checked.coercions]

    def _calls(self, held: list, checked: Checked) -> list:
        """The choice's calls: validated, or as they came once retries ran out."""
        s = self.s
        if s.config.mode != "guard":  # the grammar alone: calls as parsed, problems only reported
            return held
        return self._kept + (checked.calls if checked.ok else [c for c in checked.calls if c.name in s.schemas])

    def _final(self, held: list, checked: Checked, trace: TokenTrace, last, text: str | None, calls: list,
               spans: list, gone: list[int], shown: list | None = None) -> Update:
        """The choice's calls and its finish; `text`: the whole answer's content when it differs from
        what was streamed; `gone`: the declined calls, the answer rewritten from the first one's opener
        (_rewrite: its text went out as it came), so they and every call after it are dropped."""
        s = self.s
        # given up: a call of no offered tool goes back as the text it was, as without the guard
        unknown = [ContentDelta(_call_text(c)) for c in held if c.name not in s.schemas]
        if not checked.ok:  # retries or nudges ran out
            self.report.outcome = "unresolved"
        # read before a decline drops its calls: the grammar did constrain them (it bent their names)
        self.report.triggered = bool(spans) and self.report.grammar != "none" or (bool(calls) and self.report.grammar == "forced")
        if gone:  # the model meant a tool nobody offered: its own text instead, as without the guard
            calls, spans = calls[:gone[0]], spans[:gone[0]]
        new = calls[len(self._kept):]  # calls this attempt wrote (kept ones were scored where written)
        for k, call in enumerate(new):
            span = spans[k] if len(spans) == len(new) else (spans[0][0], spans[-1][1]) if spans else None
            conf = trace.min_prob(*span) if span else None
            entry = {"id": call.id, "name": call.name, "confidence": conf}
            if call.id in self._name_probs:  # what the decline gate read: for tuning its floor
                entry["name_prob"] = self._name_probs[call.id]
            self.report.calls.append(entry)
        events = (shown or []) + unknown + [ToolCallEvent(k, c) for k, c in enumerate(calls)]
        self.report.events = list(s.events) + self._log.events
        if hasattr(s.metrics, "observe_guard"):
            s.metrics.observe_guard(self.report)
        if last is None:
            return Update(events, finished=True, finish_reason="stop", content=text)
        return Update(events, [], None, True, last.finish_reason, last.stop_reason, text)

    def _declined(self, calls: list, spans: list, trace: TokenTrace) -> list[int]:
        """The indices of the lazily triggered calls of a first attempt whose tool the grammar chose,
        not the model (hearth.tool_guard.declined); `tool_choice: auto` only."""
        s = self.s
        if (s.config.mode != "guard" or s.required or self.report.grammar != "lazy" or self.report.retries
                or self._kept or not calls or len(spans) != len(calls)):
            return []
        out = []
        for k, (call, span) in enumerate(zip(calls, spans)):
            if self.params.raw_logprobs:
                self._name_probs[call.id] = name_prob(trace, span)
            if k < self._sent:  # streamed: the gate let it through at its name (hearth.api.guard_stream)
                continue
            p = overridden(trace, span, s.config.decline_below)
            if p is not None:
                out.append(k)
                self._log.add("declined", name=call.name, name_prob=p, rewritten="unconstrained")
        return out

    async def _rewrite(self, ids: list[int], params: SamplingParams, trace: TokenTrace, start: int, attempt: int,
                       hold: bool, into: _Rewrite) -> AsyncIterator[Update]:
        """The answer from byte `start` (a declined call's opener) on, as the model writes it without
        the grammar: the same sampling after the same tokens (the prompt a prefix-cache hit). Its text
        streams as it comes (unless a workflow holds the answer); it is text, whatever it says."""
        before = trace.prefix_tokens(start)
        room = None if params.max_tokens is None else max(1, params.max_tokens - len(before))
        free = replace(params, structured_output=None, raw_logprobs=False, raw_logprobs_at=None, max_tokens=room,
                       prompt_logprobs=None)
        self._gen, self._counted = self._start(ids + before, free, attempt), False
        cont = TokenTrace(self.s.token_bytes)
        # tokens before the opener that the trace cut inside of: the continuation writes them again
        skip = start - max((b for _, b, _ in trace.spans if b <= start), default=0)  # bytes the client has
        async for _, out in self._gen.outputs():
            cont.add(out.new_text, out.new_token_ids, out.new_logprobs, out.new_raw_logprobs)
            new = out.new_text
            if skip > 0:
                cut = new.encode()[:skip]
                skip -= len(cut)
                new = new.encode()[len(cut):].decode("utf-8", "replace")
            into.text += new
            into.last = out
            yield Update([ContentDelta(new)] if new and not hold else [], out.new_token_ids, self._logprobs(out))
        self._count(cont)

    def _logprobs(self, out):
        return out.new_logprobs if self.s.client_logprobs else None


@dataclass(slots=True)
class _Rewrite:
    """What _rewrite wrote: its text from the declined call's opener on, and its last output."""
    text: str = ""
    last: object | None = None


def _no_hold() -> None:
    pass


def _call_text(call) -> str:
    return f'{{"name": {json.dumps(call.name)}, "arguments": {call.arguments}}}'


def _kept_content(said: list[str], resumed: str | None) -> str | None:
    """The content a resample of rescued calls keeps (None: all the attempt said): their text is in
    what it said, so only the part before the point the resample writes again from (none when it starts
    over); a whole answer that kept it all showed the first attempt's calls as text beside the resample's.
    (Text after a marked call stays, as a stream releases it: tests/server/test_tool_guard.py.)"""
    shown = "".join(said)
    if resumed is None or shown == resumed or not shown.startswith(resumed):
        return None
    return resumed
