"""POST /v1/chat/completions: messages (+ tools) -> prompt -> n engine requests -> a chat.completion
body, or chat.completion.chunk events (role chunk, deltas, finish chunk, optional usage chunk,
`data: [DONE]`; a choice's role chunk goes out with its first delta, its content null before a tool
call). vLLM's `prompt_logprobs: N` puts the prompt's logprobs, ranks and top N in the
body's top-level `prompt_logprobs` (whole replies only, as vLLM: hearth.api.openai_protocol)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from fastapi import APIRouter, Request

from hearth.api.errors import APIError, error_body, from_hearth_error
from hearth.api.choices import settle
from hearth.api.generate import until_disconnect
from hearth.api.guard_extras import RequestGuard
from hearth.api.guided import compiled, guided
from hearth.api.logprobs import chat_logprobs, prompt_logprobs
from hearth.api.messages import openai_messages
from hearth.api.openai_protocol import ChatCompletionRequest, stream_usage
from hearth.api.parsing import openai_finish
from hearth.api.read_before_load import read_before_load
from hearth.api.reasoning_tokens import reasoning_tokens
from hearth.api.sampling import check_logprobs, common_fields, logit_bias, response_format, stop_list, token_ids
from hearth.api.sampling import asked_prompt_logprobs, check_before_load
from hearth.api.sse import DONE, SSEResponse, data_event
from hearth.api.tool_layer import ChoicesRequest, reprompt_ids
from hearth.api.tool_router import extensions_before_load, routed_choices
from hearth.api.tools import forces_call, legacy_functions, openai_tools, plan_tools, prompt_messages
from hearth.api.typed_options import effort_kwargs
from hearth.errors import HearthError
from hearth.tool_guard.routing import Ask
from hearth.tool_parsers import (ContentDelta, ReasoningDelta, ToolCallArgumentsDelta, ToolCallEvent,
                                 ToolCallStart, collect)

router = APIRouter()


@router.post("/v1/chat/completions")
@router.post("/chat/completions", include_in_schema=False)  # llama-server's too: clients given a base URL without /v1
async def chat_completions(body: ChatCompletionRequest, request: Request):
    state = request.app.state
    if body.top_logprobs is not None and not body.logprobs:  # OpenAI's rule: it was dropped without a word
        raise APIError(400, "top_logprobs: logprobs must be true when top_logprobs is used", param="top_logprobs")
    max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    names = {"max_tokens": "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens",
             "logprobs": "top_logprobs", **body.llama_names()}
    asked = {**common_fields(body), "n": body.n, "max_tokens": max_tokens, "min_tokens": body.min_tokens,
             "stop": stop_list(body.stop)}
    check_before_load(state.models, body.model, state.limits, asked, names)
    reading = read_before_load(state.models, body.model, lambda images: openai_messages(body.messages, images=images))
    legacy = body.functions is not None and body.tools is None  # the tools need no model either: read before it loads
    tools, tool_choice = (legacy_functions(body.functions, body.function_call) if legacy
                          else (body.tools, body.tool_choice))
    offered = openai_tools(tools, "functions", "") if legacy else openai_tools(tools)
    ext = extensions_before_load(state, body.model, body.hearth, offered, body.n)
    fmt = compiled(response_format(body.response_format), "response_format.json_schema.schema")
    choice_param = "function_call" if legacy else "tool_choice"
    # the constraints need no model: checked before it loads (a forced call's grammar comes with it)
    guided(body, {"tool_choice": forces_call(offered, tool_choice, choice_param) or None, "response_format": fmt})
    served = await state.models.get(body.model)
    history, images = reading.on(served)
    await served.load_images(images)
    guard = RequestGuard(ext, offered, history, tool_choice)
    plan = plan_tools(served, guard.tools, tool_choice, choice_param)
    parallel = body.parallel_tool_calls and not legacy
    guard.prompt_hint(plan, parallel)
    prompt, ids = guard.fit(lambda msgs: _render(served, plan, msgs, body, images), history, served.max_model_len,
                            max_tokens, served.model_context)
    fields = _sampling_fields(body, plan, served, fmt)
    ask = Ask(guard.tools, tool_choice, history, body.n,
              token_level=bool(body.logprobs or body.logit_bias or body.stop_token_ids
                               or fields["prompt_logprobs"] is not None),  # the main model's, not the router's
              structured=fields["structured_output"] not in (None, plan.constraint),
              workflow=guard.ext.workflow is not None, prefill=body.continue_final_message)
    req = ChoicesRequest(served, plan, prompt, ids, fields, names, guard, parallel,
                         lambda extra: _reprompt(served, plan, body, guard, history + openai_messages(extra), images,
                                                 fields["max_tokens"]),
                         streaming=bool(body.stream))
    source, client_k = await routed_choices(state, body.model, ask,
                                            lambda s, p: _render(s, p, history, body, images), req)
    reply = _Reply(served, source, client_k, parallel, legacy, (ids, fields["prompt_logprobs"]),
                   served.answer_name(body.model))
    if body.stream:
        usage, reply.continuous = stream_usage(body.stream_options)
        return SSEResponse(reply.events(usage, request.url.path), on_close=source.abort)
    result = await until_disconnect(request, reply.body())
    return result if result is not None else {}


def _template_kwargs(body: ChatCompletionRequest) -> dict | None:
    return effort_kwargs(body.reasoning_effort, body.chat_template_kwargs)


def _render(served, plan, messages: list[dict], body: ChatCompletionRequest, images=None) -> tuple[str, list[int]]:
    text = served.render_chat(prompt_messages(served, plan, messages), plan.tools if plan.in_template else None,
                              add_generation_prompt=body.add_generation_prompt and not body.continue_final_message,
                              continue_final=body.continue_final_message, template_kwargs=_template_kwargs(body))
    return text, served.encode_chat_text(text, images, messages)


def _reprompt(served, plan, body: ChatCompletionRequest, guard: RequestGuard, conversation: list[dict], images,
              max_tokens: int | None) -> list[int]:
    """The conversation with a failed attempt and its error appended (compacted with
    hearth.compaction), as prompt ids."""
    def render(msgs: list[dict]) -> tuple[str, list[int]]:
        text = served.render_chat(prompt_messages(served, plan, msgs), plan.tools if plan.in_template else None,
                                  template_kwargs=_template_kwargs(body))
        return text, served.encode_chat_text(text, images, msgs)
    text, ids = guard.fit(render, conversation, served.max_model_len, max_tokens, served.model_context)
    return reprompt_ids(served, text, max_tokens, ids)


def _sampling_fields(body: ChatCompletionRequest, plan, served, fmt) -> dict:
    """fmt: response_format's constraint (read before the load)."""
    k = check_logprobs("top_logprobs", body.top_logprobs, served)
    return {**common_fields(body, served), "n": body.n, "stop": stop_list(body.stop),
            "max_tokens": body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens,
            "stop_token_ids": token_ids("stop_token_ids", body.stop_token_ids, served.vocab_size),
            "logit_bias": logit_bias(body.logit_bias, served), "bad_words": body.bad_words,
            "logprobs": (k or 0) if body.logprobs else None, "min_tokens": body.min_tokens,
            "prompt_logprobs": asked_prompt_logprobs(body, served),
            "ignore_eos": body.ignore_eos, "skip_special_tokens": body.skip_special_tokens,
            "include_stop_str_in_output": body.include_stop_str_in_output,
            "structured_output": guided(body, {"tool_choice": plan.constraint, "response_format": fmt})}


def _tool_call(call, index: int | None = None) -> dict:
    out = {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
    return out if index is None else {"index": index, **out}


class _Reply:
    def __init__(self, served, source, top_logprobs: int | None, parallel: bool = True, legacy: bool = False,
                 asked: tuple[list[int], int | None] = ([], None), model: str | None = None):
        """source: PlainChoices or GuardedChoices (hearth.api.choices): parsed updates per choice;
        asked: the prompt's ids and vLLM's prompt_logprobs as asked (None: not asked); model: the name the
        response gives (ServedModel.answer_name; None: the served id)."""
        self.served, self.src, self.k = served, source, top_logprobs
        self.model = model or served.name
        self.prompt_ids, self.prompt_k = asked
        self.parallel = parallel
        """parallel_tool_calls false: only a response's first call is returned."""
        self.legacy = legacy
        """The request used legacy `functions`: a call is a `function_call`, finish_reason "function_call"."""
        self.id = f"chatcmpl-{source.request_id}"
        self.created = int(time.time())
        self.completion_tokens = 0
        self.reasoning = [""] * source.n
        """Each choice's reasoning text so far: its tokens are usage's reasoning_tokens."""
        self.continuous = False
        """stream_options.continuous_usage_stats (with include_usage): every chunk carries the usage so far."""

    def usage(self, final: bool = True) -> dict:
        """final: with completion_tokens_details where the answer reasoned (OpenAI's shape), which a continuous
        stream's other chunks leave out: encoding the reasoning again at every chunk would be quadratic."""
        p, c = self.src.num_prompt_tokens, self.completion_tokens
        out = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c,
               "prompt_tokens_details": {"cached_tokens": self.src.num_cached_tokens}}
        if final and any(self.reasoning):
            out["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens(self.served, self.reasoning, c)}
        return out

    def extension(self) -> dict | None:
        """The `hearth` field: what the tool guard did (choice 0's report; every choice's when n > 1)."""
        reports = [self.src.report(i) for i in range(self.src.n)]
        if reports[0] is None:
            return None
        return reports[0] if len(reports) == 1 else {**reports[0], "choices": reports}

    async def body(self) -> dict:
        choices = []
        collected = await _collect(self.src)
        for c in collected:
            self.completion_tokens += len(c.token_ids)
            parsed = collect(c.events)
            calls = parsed.tool_calls if self.parallel else parsed.tool_calls[:1]
            message: dict = {"role": "assistant", "content": parsed.content or (None if calls else "")}
            if parsed.reasoning:
                message["reasoning_content"] = message["reasoning"] = self.reasoning[c.index] = parsed.reasoning
            if calls and self.legacy:
                message["function_call"] = {"name": calls[0].name, "arguments": calls[0].arguments}
            elif calls:
                message["tool_calls"] = [_tool_call(call) for call in calls]
            logprobs = None
            if self.k is not None:
                logprobs = {"content": chat_logprobs(self.served.tokenizer, c.token_ids, c.logprobs, self.k)}
            choices.append({"index": c.index, "message": message, "logprobs": logprobs,
                            "finish_reason": self._finish(c.finish_reason, bool(calls)),
                            "stop_reason": c.stop_reason})
        out = {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
               "choices": choices, "usage": self.usage(), "system_fingerprint": None}
        if self.prompt_k is not None:  # the request's one prompt: its first choice scored it
            scored = next(c for c in collected if c.prompt_logprobs is not None)
            out["prompt_logprobs"] = prompt_logprobs(self.served.tokenizer, self.prompt_ids, scored.prompt_logprobs,
                                                     scored.prompt_ranks, self.prompt_k)
        ext = self.extension()
        return out if ext is None else {**out, "hearth": ext}

    def _finish(self, reason: str | None, called: bool) -> str | None:
        finish = openai_finish(reason, called)
        return "function_call" if self.legacy and finish == "tool_calls" else finish

    def _chunk(self, choices: list, usage: bool, usage_value=None, ext: dict | None = None) -> str:
        payload = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                   "model": self.model, "system_fingerprint": None, "choices": choices}
        if usage:  # the last chunk's usage; with continuous stats, every other chunk's so far
            payload["usage"] = self.usage(final=False) if self.continuous and usage_value is None else usage_value
        if ext is not None:
            payload["hearth"] = ext
        return data_event(payload)

    async def events(self, usage: bool, path: str):
        n = self.src.n
        called = [False] * n
        sent: list[dict[int, int]] = [{} for _ in range(n)]  # per choice: call index -> argument chars sent
        opened = [False] * n  # its role chunk went out (with its first delta: _role)
        try:
            async for i, out in self.src.updates():
                self.completion_tokens += len(out.token_ids)
                self.reasoning[i] += "".join(e.text for e in out.events if isinstance(e, ReasoningDelta))
                deltas = _deltas(out.events, called, i, self.parallel, self.legacy, sent[i])
                logprobs = None
                if self.k is not None and out.logprobs:
                    lp = chat_logprobs(self.served.tokenizer, out.token_ids, out.logprobs, self.k)
                    logprobs = {"content": lp}
                    deltas = deltas or [{}]
                if not opened[i] and (deltas or out.finished):
                    opened[i] = True
                    yield self._chunk([_choice(i, _role(deltas))], usage)
                for j, delta in enumerate(deltas):
                    yield self._chunk([_choice(i, delta, logprobs if j == 0 else None)], usage)
                if out.finished:
                    finish = self._finish(out.finish_reason, called[i])
                    yield self._chunk([_choice(i, {}, None, finish, out.stop_reason)], usage, ext=self.src.report(i))
        except HearthError as e:
            err = from_hearth_error(e, path)
            yield data_event(error_body(path, err.status, err.message, err.param, err.code))
            yield DONE
            return
        if usage:
            yield self._chunk([], True, self.usage())
        yield DONE


async def _collect(source) -> list[Choice]:
    """Every choice's updates, whole."""
    choices = [Choice(i) for i in range(source.n)]
    async for i, u in source.updates():
        c = choices[i]
        c.events = settle(c.events, u)
        c.token_ids += u.token_ids
        c.logprobs += u.logprobs or []
        if u.prompt_logprobs is not None:
            c.prompt_logprobs, c.prompt_ranks = u.prompt_logprobs, u.prompt_ranks
        if u.finished:
            c.finish_reason, c.stop_reason = u.finish_reason, u.stop_reason
    return choices


@dataclass(slots=True)
class Choice:
    index: int
    events: list = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[dict[int, float]] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    prompt_logprobs: list[dict[int, float] | None] | None = None
    prompt_ranks: list[int | None] | None = None


def _role(deltas: list[dict]) -> dict:
    """A choice's first delta, sent with what comes first: OpenAI's `"content": ""` before text (or an answer of
    nothing), null before a tool call (OpenAI's; a reasoning channel's too), so that an SDK's stream accumulator
    ends a tool-call answer with the content null the whole (non-streamed) answer has, not ""."""
    first = deltas[0] if deltas else {}
    return {"role": "assistant", "content": "" if not first or "content" in first else None}


def _choice(i: int, delta: dict, logprobs=None, finish: str | None = None, stop_reason=None) -> dict:
    out = {"index": i, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
    if finish is not None:
        out["stop_reason"] = stop_reason
    return out


def _deltas(events: list, called: list[bool], i: int, parallel: bool = True, legacy: bool = False,
            sent: dict[int, int] | None = None) -> list[dict]:
    """One delta per event, adjacent text of the same channel merged. A call announced while it is
    written goes out as OpenAI streams calls: id and name first, then its arguments in pieces;
    `sent` (call index -> argument characters sent) lets the complete call send only the rest."""
    sent = {} if sent is None else sent
    out: list[dict] = []
    for e in events:
        if isinstance(e, ContentDelta) and e.text:
            if out and set(out[-1]) == {"content"}:
                out[-1]["content"] += e.text
            else:
                out.append({"content": e.text})
        elif isinstance(e, ReasoningDelta) and e.text:
            if out and set(out[-1]) == {"reasoning_content", "reasoning"}:
                out[-1]["reasoning_content"] += e.text
                out[-1]["reasoning"] += e.text
            else:
                out.append({"reasoning_content": e.text, "reasoning": e.text})
        elif isinstance(e, ToolCallStart) and (parallel or not called[i]):
            called[i], sent[e.index] = True, 0
            out.append({"function_call": {"name": e.name, "arguments": ""}} if legacy else
                       {"tool_calls": [{"index": e.index, "id": e.id, "type": "function",
                                        "function": {"name": e.name, "arguments": ""}}]})
        elif isinstance(e, ToolCallArgumentsDelta) and e.index in sent:
            sent[e.index] += len(e.text)
            out.append(_arguments_delta(e.index, e.text, legacy))
        elif isinstance(e, ToolCallEvent) and e.index in sent:
            rest = e.call.arguments[sent.pop(e.index):]
            if rest:
                out.append(_arguments_delta(e.index, rest, legacy))
        elif isinstance(e, ToolCallEvent) and (parallel or not called[i]):
            called[i] = True
            if legacy:
                out.append({"function_call": {"name": e.call.name, "arguments": e.call.arguments}})
            else:
                out.append({"tool_calls": [_tool_call(e.call, e.index)]})
    return out


def _arguments_delta(index: int, text: str, legacy: bool) -> dict:
    if legacy:
        return {"function_call": {"arguments": text}}
    return {"tool_calls": [{"index": index, "function": {"arguments": text}}]}
