"""POST /v1/chat/completions: messages (+ tools) -> prompt -> n engine requests -> a chat.completion
body, or chat.completion.chunk events (role chunk, deltas, finish chunk, optional usage chunk,
`data: [DONE]`)."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace

from fastapi import APIRouter, Request

from hearth.api.errors import APIError, error_body, from_hearth_error
from hearth.api.generate import Generation, until_disconnect
from hearth.api.guard_extras import RequestGuard, reviewed
from hearth.api.logprobs import chat_logprobs
from hearth.api.messages import openai_messages
from hearth.api.openai_protocol import ChatCompletionRequest
from hearth.api.parsing import openai_finish, output_parser
from hearth.api.sampling import common_fields, logit_bias, make_params, response_format, stop_list
from hearth.api.sse import DONE, SSEResponse, data_event
from hearth.api.tools import legacy_functions, openai_tools, plan_tools, prompt_messages
from hearth.errors import HearthError
from hearth.tool_guard.guard_event import GuardLog, attach
from hearth.tool_parsers import (ContentDelta, ReasoningDelta, ToolCall, ToolCallArgumentsDelta, ToolCallEvent,
                                 ToolCallStart)

router = APIRouter()


@router.post("/v1/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request):
    state = request.app.state
    served = state.served
    served.check_model(body.model)
    legacy = body.functions is not None and body.tools is None
    tools, tool_choice = legacy_functions(body.functions, body.function_call) if legacy else (body.tools, body.tool_choice)
    history = openai_messages(body.messages)
    guard = RequestGuard(body.hearth, openai_tools(tools), history, tool_choice, body.n)  # tool_guard extras
    plan = plan_tools(served, guard.tools, tool_choice, "function_call" if legacy else "tool_choice")
    guard.constrained(plan.constraint)
    params = make_params(_sampling_fields(body, plan, served), state.limits, served.max_model_len, {
        "max_tokens": "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens",
        "logprobs": "top_logprobs"})

    def render(msgs: list[dict]) -> tuple[str, list[int]]:
        text = served.render_chat(prompt_messages(served, plan, msgs), plan.tools if plan.in_template else None,
                                  add_generation_prompt=body.add_generation_prompt and not body.continue_final_message,
                                  continue_final=body.continue_final_message, template_kwargs=body.chat_template_kwargs)
        return text, served.encode_chat_text(text)

    def start(msgs: list[dict], grammar=None) -> _Reply:
        prompt, ids = guard.fit(render, msgs, served.max_model_len, params.max_tokens)
        gen = Generation(served.engine, ids, replace(params, structured_output=grammar) if grammar else params,
                         state.metrics)
        parsers = [guard.parser(output_parser(served, plan, prompt), plan.tools) for _ in range(gen.n)]
        return _Reply(served, gen, parsers, params.logprobs, body.parallel_tool_calls and not legacy, legacy, guard.log)

    usage = bool(body.stream_options and body.stream_options.include_usage)
    if guard.reviews:  # hearth.workflow or a forced call: reviewed whole, nudged within the request
        result = await until_disconnect(request, _reviewed(guard, start, plan.parse_format))
        if result is None or not body.stream:
            return result if result is not None else {}
        return SSEResponse(_replay(result, usage))
    reply = start(history)
    if body.stream:
        return SSEResponse(reply.events(usage, request.url.path), on_close=reply.gen.abort)
    result = await until_disconnect(request, reply.body())
    return attach(result, guard.log) if result is not None else {}


async def _reviewed(guard: RequestGuard, start, fmt: str | None) -> dict:
    """The answer after the review loop (hearth.api.guard_extras.reviewed); usage counts every attempt."""
    async def attempt(msgs: list[dict], grammar):
        body = await start(msgs, grammar).body()
        message = body["choices"][0]["message"]
        calls = [ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"])
                 for c in message.get("tool_calls") or ([{"id": "call_0", "function": message["function_call"]}]
                                                       if message.get("function_call") else [])]
        return body, message.get("content") or "", calls
    bodies = await reviewed(guard, attempt, fmt)
    final = bodies[-1]
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        final["usage"][key] = sum(b["usage"][key] for b in bodies)
    return attach(final, guard.log)


async def _replay(body: dict, usage: bool):
    """A whole chat.completion as the chunks a stream of it would have sent (one per channel)."""
    head = {k: body[k] for k in ("id", "created", "model", "system_fingerprint")} | {"object": "chat.completion.chunk"}
    choice = body["choices"][0]
    message = choice["message"]
    deltas = [{"role": "assistant", "content": ""}]
    for key in ("reasoning_content", "content"):
        if message.get(key):
            deltas.append({key: message[key]} | ({"reasoning": message[key]} if key == "reasoning_content" else {}))
    if message.get("function_call"):
        deltas.append({"function_call": message["function_call"]})
    deltas += [{"tool_calls": [{"index": i, **call}]} for i, call in enumerate(message.get("tool_calls") or [])]
    for delta in deltas:
        yield data_event(head | {"choices": [_choice(0, delta)]} | ({"usage": None} if usage else {}))
    last = head | {"choices": [_choice(0, {}, None, choice["finish_reason"], choice.get("stop_reason"))]}
    if "hearth" in body:
        last["hearth"] = body["hearth"]
    yield data_event(last | ({"usage": None} if usage else {}))
    if usage:
        yield data_event(head | {"choices": [], "usage": body["usage"]})
    yield DONE


def _sampling_fields(body: ChatCompletionRequest, plan, served) -> dict:
    if body.top_logprobs is not None and not 0 <= body.top_logprobs <= 20:
        raise APIError(400, f"top_logprobs: must be in [0, 20], got {body.top_logprobs}", param="top_logprobs")
    if plan.constraint is not None and body.response_format is not None and body.response_format.type != "text":
        raise APIError(400, "response_format: cannot be combined with a tool_choice that forces a call",
                       param="response_format")
    return {**common_fields(body), "n": body.n, "stop": stop_list(body.stop),
            "max_tokens": body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens,
            "stop_token_ids": body.stop_token_ids or [], "logit_bias": logit_bias(body.logit_bias, served.vocab_size),
            "logprobs": (body.top_logprobs or 0) if body.logprobs else None, "min_tokens": body.min_tokens,
            "ignore_eos": body.ignore_eos, "skip_special_tokens": body.skip_special_tokens,
            "include_stop_str_in_output": body.include_stop_str_in_output,
            "structured_output": plan.constraint or response_format(body.response_format)}


def _tool_call(call, index: int | None = None) -> dict:
    out = {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
    return out if index is None else {"index": index, **out}


class _Reply:
    def __init__(self, served, gen: Generation, parsers: list, top_logprobs: int | None, parallel: bool = True,
                 legacy: bool = False, log: GuardLog | None = None):
        self.served, self.gen, self.parsers, self.k = served, gen, parsers, top_logprobs
        self.log = log
        """What the tool guard did: reported on the finish chunks of a stream."""
        self.parallel = parallel
        """parallel_tool_calls false: only a response's first call is returned."""
        self.legacy = legacy
        """The request used legacy `functions`: a call is a `function_call`, finish_reason "function_call"."""
        self.id = f"chatcmpl-{gen.request_id}"
        self.created = int(time.time())
        self.completion_tokens = 0

    def usage(self) -> dict:
        p, c = self.gen.num_prompt_tokens, self.completion_tokens
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c,
                "prompt_tokens_details": {"cached_tokens": self.gen.num_cached_tokens}}

    async def body(self) -> dict:
        choices = []
        for c in await self.gen.collect():
            self.completion_tokens += len(c.token_ids)
            parsed = self.parsers[c.index].parse(c.text)
            calls = parsed.tool_calls if self.parallel else parsed.tool_calls[:1]
            message: dict = {"role": "assistant", "content": parsed.content or (None if calls else "")}
            if parsed.reasoning:
                message["reasoning_content"] = message["reasoning"] = parsed.reasoning
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
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.served.name,
                "choices": choices, "usage": self.usage(), "system_fingerprint": None}

    def _finish(self, reason: str | None, called: bool) -> str | None:
        finish = openai_finish(reason, called)
        return "function_call" if self.legacy and finish == "tool_calls" else finish

    def _chunk(self, choices: list, usage: bool, usage_value=None) -> str:
        payload = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                   "model": self.served.name, "system_fingerprint": None, "choices": choices}
        if usage:
            payload["usage"] = usage_value
        if self.log is not None and any(c.get("finish_reason") for c in choices):
            attach(payload, self.log)
        return data_event(payload)

    async def events(self, usage: bool, path: str):
        called = [False] * self.gen.n
        sent: list[dict[int, int]] = [{} for _ in range(self.gen.n)]  # per choice: call index -> argument chars sent
        for i in range(self.gen.n):
            yield self._chunk([_choice(i, {"role": "assistant", "content": ""})], usage)
        try:
            async for i, out in self.gen.outputs():
                self.completion_tokens += len(out.new_token_ids)
                parser = self.parsers[i]
                events = parser.feed(out.new_text) + (parser.finish() if out.finished else [])
                deltas = _deltas(events, called, i, self.parallel, self.legacy, sent[i])
                logprobs = None
                if self.k is not None and out.new_logprobs:
                    lp = chat_logprobs(self.served.tokenizer, out.new_token_ids, out.new_logprobs, self.k)
                    logprobs = {"content": lp}
                    deltas = deltas or [{}]
                for j, delta in enumerate(deltas):
                    yield self._chunk([_choice(i, delta, logprobs if j == 0 else None)], usage)
                if out.finished:
                    finish = self._finish(out.finish_reason, called[i])
                    yield self._chunk([_choice(i, {}, None, finish, out.stop_reason)], usage)
        except HearthError as e:
            err = from_hearth_error(e)
            yield data_event(error_body(path, err.status, err.message, code=err.code))
            yield DONE
            return
        if usage:
            yield self._chunk([], True, self.usage())
        yield DONE


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
