"""Anthropic's streaming events for one message: message_start, ping, then per content block
content_block_start / content_block_delta... / content_block_stop (a thinking block's last delta is its
signature_delta), then message_delta (stop_reason, usage) and message_stop. A call announced while it is written (ToolCallStart) opens its tool_use
block at once and its arguments follow as input_json_delta pieces, as Anthropic streams tool input;
a call that arrives whole is one delta. An engine failure mid-stream is an `error` event, then the
stream ends."""

from __future__ import annotations

import json

from hearth.api.errors import error_body, from_hearth_error
from hearth.api.parsing import anthropic_stop
from hearth.api.sse import named_event
from hearth.errors import HearthError
from hearth.tool_parsers import (ContentDelta, ReasoningDelta, ToolCallArgumentsDelta, ToolCallEvent, ToolCallStart,
                                 arguments_rest)


def usage(gen, output_tokens: int) -> dict:
    """gen: anything with num_prompt_tokens and num_cached_tokens (a Generation, the route's choices)."""
    cached = gen.num_cached_tokens
    return {"input_tokens": gen.num_prompt_tokens - cached, "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached}


def tool_input(call) -> dict | None:
    """The call's arguments as Anthropic's `input` (an object), or None when they are not a JSON
    object (cut by max_tokens, or broken): a `{}` would be a clean call the model did not write."""
    try:
        arguments = json.loads(call.arguments)
    except ValueError:
        return None
    return arguments if isinstance(arguments, dict) else None


def tool_use_block(call) -> dict:
    """The call's tool_use block; `input` {} where it has none (the stream's block start: its text follows)."""
    return {"type": "tool_use", "id": tool_use_id(call.id), "name": call.name, "input": tool_input(call) or {}}


def unparsed_tool_use(call) -> dict:
    """A call with no `input` object, as the `hearth` field's `unparsed_tool_use` reports it (whole messages):
    its id and name, the text written (as a stream's partial_json pieces would be) and why it is not JSON."""
    return {"id": tool_use_id(call.id), "name": call.name, "partial_json": call.arguments,
            "error": call.unparsed or "the arguments are not a JSON object"}


def tool_use_id(call_id: str) -> str:
    """Anthropic's `toolu_` id for a call: the same letters as its OpenAI id (and the `hearth` report's)."""
    return "toolu_" + call_id.removeprefix("call_")


def _event(payload: dict) -> str:
    return named_event(payload["type"], payload)


class _Blocks:
    """Opens, fills and closes content blocks as channel events arrive. parallel False (Anthropic's
    disable_parallel_tool_use): calls after the first are dropped, as OpenAI's parallel_tool_calls false."""

    def __init__(self, parallel: bool = True):
        self.index, self.open_kind, self.called, self.parallel = -1, None, False, parallel
        self._streaming: int | None = None  # the streamed call whose block is open
        self._started: dict[int, str] = {}  # streamed call index -> the input JSON sent

    def close(self) -> list[str]:
        if self.open_kind is None:
            return []
        # Anthropic ends a thinking block with its signature_delta (clients keep it to send the block back);
        # hearth signs nothing: the empty signature a whole message's thinking block has
        signed = ([_event({"type": "content_block_delta", "index": self.index,
                           "delta": {"type": "signature_delta", "signature": ""}})]
                  if self.open_kind == "thinking" else [])
        self.open_kind, self._streaming = None, None
        return signed + [_event({"type": "content_block_stop", "index": self.index})]

    def _open(self, kind: str, block: dict) -> list[str]:
        out = self.close()
        self.index += 1
        self.open_kind = kind
        return out + [_event({"type": "content_block_start", "index": self.index, "content_block": block})]

    def text(self, kind: str, text: str) -> list[str]:
        if not text:
            return []
        out = []
        if self.open_kind != kind:
            block = {"type": "text", "text": ""} if kind == "text" else {"type": "thinking", "thinking": "", "signature": ""}
            out += self._open(kind, block)
        delta = {"type": "text_delta", "text": text} if kind == "text" else {"type": "thinking_delta", "thinking": text}
        return out + [_event({"type": "content_block_delta", "index": self.index, "delta": delta})]

    def tool(self, call) -> list[str]:
        self.called = True
        block = tool_use_block(call)
        out = self._open("tool_use", {**block, "input": {}})
        # a call that is not JSON (cut off by max_tokens) streams its text as written, not an invented {}
        text = call.arguments if call.unparsed else json.dumps(block["input"], ensure_ascii=False)
        return out + (self._input(text) if text else []) + self.close()

    def tool_start(self, e: ToolCallStart) -> list[str]:
        self.called = True
        out = self._open("tool_use", {"type": "tool_use", "id": tool_use_id(e.id), "name": e.name, "input": {}})
        self._started[e.index], self._streaming = "", e.index
        return out

    def tool_input(self, index: int, text: str) -> list[str]:
        if self._streaming != index:
            return []
        self._started[index] += text
        return self._input(text)

    def tool_done(self, e: ToolCallEvent) -> list[str]:
        """The end of a streamed call: the rest of its arguments (the pieces are a prefix of them),
        and its block closed if it is still the open one (under the guard, text may come between a
        call's last piece and its end: that text's block closed it already)."""
        if self._streaming != e.index:
            return []
        sent = self._started[e.index]
        rest = arguments_rest(e.call.arguments, sent)
        return (self._input(rest) if rest else []) + self.close()

    def _dropped(self, e) -> bool:
        """A call after the first where parallel calls are off (its pieces follow no open block anyway)."""
        new_call = isinstance(e, ToolCallStart) or (isinstance(e, ToolCallEvent) and e.index not in self._started)
        return new_call and not self.parallel and self.called

    def _input(self, text: str) -> list[str]:
        delta = {"type": "input_json_delta", "partial_json": text}
        return [_event({"type": "content_block_delta", "index": self.index, "delta": delta})]

    def events(self, events: list) -> list[str]:
        out: list[str] = []
        for e in events:
            if self._dropped(e):
                continue
            if isinstance(e, ContentDelta):
                out += self.text("text", e.text)
            elif isinstance(e, ReasoningDelta):
                out += self.text("thinking", e.text)
            elif isinstance(e, ToolCallStart):
                out += self.tool_start(e)
            elif isinstance(e, ToolCallArgumentsDelta):
                out += self.tool_input(e.index, e.text)
            elif isinstance(e, ToolCallEvent) and e.index in self._started:
                out += self.tool_done(e)
            elif isinstance(e, ToolCallEvent):
                out += self.tool(e.call)
        return out


async def message_events(served, gen, parallel: bool = True, model: str | None = None):
    """gen: the message's choices (hearth.api.choices / hearth.api.guarded): parsed updates.
    message_start goes out with the first update: only then does the engine know how much of the
    prompt the prefix cache held, so its usage agrees with message_delta's (input_tokens without
    the cache reads, as Anthropic counts). A tool-guard retry's prompt comes later: message_delta's
    usage counts every attempt, message_start's the first."""
    blocks, output_tokens, last, started = _Blocks(parallel), 0, None, False
    try:
        async for _, out in gen.updates():
            if not started:
                started = True
                for event in _start(served, gen, model):
                    yield event
            output_tokens += len(out.token_ids)
            for event in blocks.events(out.events):
                yield event
            if out.finished:
                last = out
    except HearthError as e:
        err = from_hearth_error(e, "/v1/messages")
        yield named_event("error", error_body("/v1/messages", err.status, err.message))
        return
    if not started:
        for event in _start(served, gen, model):
            yield event
    for event in blocks.close():
        yield event
    reason = last.finish_reason if last else "stop"
    stop = anthropic_stop(reason, blocks.called, last.stop_reason if last else None)
    delta = {"stop_reason": stop, "stop_sequence": last.stop_reason if stop == "stop_sequence" else None}
    ext = gen.report(0)
    message_delta = {"type": "message_delta", "delta": delta, "usage": {**usage(gen, output_tokens)}}
    yield _event(message_delta if ext is None else {**message_delta, "hearth": ext})
    yield _event({"type": "message_stop"})


def _start(served, gen, model: str | None) -> list[str]:
    start = {"id": f"msg_{gen.request_id}", "type": "message", "role": "assistant", "model": model or served.name,
             "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage(gen, 0)}
    return [_event({"type": "message_start", "message": start}), _event({"type": "ping"})]
