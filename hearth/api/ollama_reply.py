"""Ollama's answers to /api/chat and /api/generate, from a request's parsed updates (hearth.api.choices
or hearth.api.guarded: the same source the OpenAI and Anthropic routes read).

Streamed (Ollama's default): NDJSON, one object a line, each {model, created_at, message: {role,
content, thinking?, tool_calls?} | response + thinking?, done: false}; a call goes out whole, its
arguments an object, as Ollama sends calls; the last line has done: true, done_reason and the counts and
durations (ns). An engine failure mid-stream is a line {"error": "..."}, as Ollama's. Whole: one object
with everything. A call whose arguments are not a JSON object (cut by num_predict) is no call Ollama's
shape can carry: it is reported in the `hearth` field (`unparsed_call` events), never sent as `{}`."""

from __future__ import annotations

import time

from hearth.api.anthropic_stream import tool_input
from hearth.api.choices import settle
from hearth.api.errors import from_hearth_error
from hearth.api.logprobs import chat_logprobs
from hearth.api.ollama_protocol import now
from hearth.api.sse import one_line_json
from hearth.errors import HearthError
from hearth.tool_parsers import ContentDelta, ReasoningDelta, ToolCallEvent, collect

NDJSON = "application/x-ndjson"


def line(payload: dict) -> str:
    return one_line_json(payload) + "\n"


def _ns(seconds: float) -> int:
    return max(0, int(seconds * 1e9))


def _call(call, index: int) -> dict | None:
    arguments = tool_input(call)
    if arguments is None:
        return None
    return {"id": call.id, "function": {"index": index, "name": call.name, "arguments": arguments}}


class OllamaReply:
    def __init__(self, model: str, source, chat: bool, started: float, load_s: float,
                 prompt_ids: list[int] | None = None, path: str = "/api/chat", logprobs: tuple = (None, None)):
        """model: the name as the request gave it (Ollama echoes it); source: parsed updates; chat: a
        `message` (else generate's `response`); started: the request's perf_counter; prompt_ids:
        generate's prompt, for the `context` it returns (None: raw, which returns none); logprobs: (the
        tokenizer, the top-k asked; None: none asked)."""
        self.model, self.src, self.chat, self.path = model, source, chat, path
        self.started, self.load_s, self.queued = started, load_s, time.perf_counter()
        self.first: float | None = None
        self.context = prompt_ids
        self.output_ids: list[int] = []
        self.calls = 0
        self.tokenizer, self.k = logprobs
        self.logprobs: list[dict] = []

    def _piece(self, content: str, thinking: str = "", calls: list[dict] = ()) -> dict:
        if self.chat:
            message: dict = {"role": "assistant", "content": content}
            if thinking:
                message["thinking"] = thinking
            if calls:
                message["tool_calls"] = list(calls)
            return {"model": self.model, "created_at": now(), "message": message, "done": False}
        out = {"model": self.model, "created_at": now(), "response": content}
        if thinking:
            out["thinking"] = thinking
        return {**out, "done": False}

    def _seen(self, u) -> list[dict]:
        """The update's tokens counted; their logprobs in Ollama's shape (OpenAI chat's), where asked."""
        if self.first is None:
            self.first = time.perf_counter()
        self.output_ids += u.token_ids
        if self.k is None or not u.logprobs:
            return []
        items = chat_logprobs(self.tokenizer, u.token_ids, u.logprobs, self.k)
        self.logprobs += items
        return items

    def _done(self, reason: str | None) -> dict:
        end = time.perf_counter()
        first = self.first or end
        out = {"done": True, "done_reason": "length" if reason == "length" else "stop",
               "total_duration": _ns(end - self.started), "load_duration": _ns(self.load_s),
               "prompt_eval_count": self.src.num_prompt_tokens, "prompt_eval_duration": _ns(first - self.queued),
               "eval_count": len(self.output_ids), "eval_duration": _ns(end - first)}
        if self.context is not None:
            out["context"] = self.context + self.output_ids
        report = self.src.report(0)
        return out if report is None else {**out, "hearth": report}

    def _calls(self, events: list) -> list[dict]:
        out = []
        for e in events:
            if isinstance(e, ToolCallEvent) and (call := _call(e.call, self.calls)) is not None:
                out.append(call)
                self.calls += 1
        return out

    async def lines(self):
        reason = None
        try:
            async for _, u in self.src.updates():
                logprobs = self._seen(u)
                content = "".join(e.text for e in u.events if isinstance(e, ContentDelta))
                thinking = "".join(e.text for e in u.events if isinstance(e, ReasoningDelta))
                calls = self._calls(u.events)
                if content or thinking or calls or logprobs:
                    piece = self._piece(content, thinking, calls)
                    yield line({**piece, "logprobs": logprobs} if logprobs else piece)
                if u.finished:
                    reason = u.finish_reason
        except HearthError as e:
            yield line({"error": from_hearth_error(e, self.path).message})
            return
        yield line({**self._piece(""), **self._done(reason)})

    async def whole(self) -> dict:
        events, reason = [], None
        async for _, u in self.src.updates():
            self._seen(u)
            events = settle(events, u)
            if u.finished:
                reason = u.finish_reason
        parsed = collect(events)
        calls = self._calls([ToolCallEvent(i, c) for i, c in enumerate(parsed.tool_calls)])
        out = {**self._piece(parsed.content, parsed.reasoning, calls), **self._done(reason)}
        return out if self.k is None else {**out, "logprobs": self.logprobs}
