"""Anthropic's streaming events for one message: message_start, ping, then per content block
content_block_start / content_block_delta... / content_block_stop, then message_delta (stop_reason,
usage) and message_stop. An engine failure mid-stream is an `error` event, then the stream ends."""

from __future__ import annotations

import json

from hearth.api.errors import error_body, from_hearth_error
from hearth.api.generate import Generation
from hearth.api.parsing import anthropic_stop
from hearth.api.sse import named_event
from hearth.errors import HearthError
from hearth.tool_guard.guard_event import GuardLog, attach
from hearth.tool_parsers import ContentDelta, ReasoningDelta, ToolCall, ToolCallEvent, new_call_id


def usage(gen: Generation, output_tokens: int) -> dict:
    cached = gen.num_cached_tokens
    return {"input_tokens": gen.num_prompt_tokens - cached, "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached}


def tool_use_block(call) -> dict:
    try:
        arguments = json.loads(call.arguments)
    except ValueError:
        arguments = None
    return {"type": "tool_use", "id": new_call_id("toolu_"), "name": call.name,
            "input": arguments if isinstance(arguments, dict) else {}}


def _event(payload: dict) -> str:
    return named_event(payload["type"], payload)


class _Blocks:
    """Opens, fills and closes content blocks as channel events arrive."""

    def __init__(self):
        self.index, self.open_kind, self.called = -1, None, False

    def close(self) -> list[str]:
        if self.open_kind is None:
            return []
        self.open_kind = None
        return [_event({"type": "content_block_stop", "index": self.index})]

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
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"], ensure_ascii=False)}
        out.append(_event({"type": "content_block_delta", "index": self.index, "delta": delta}))
        return out + self.close()

    def events(self, events: list) -> list[str]:
        out: list[str] = []
        for e in events:
            if isinstance(e, ContentDelta):
                out += self.text("text", e.text)
            elif isinstance(e, ReasoningDelta):
                out += self.text("thinking", e.text)
            elif isinstance(e, ToolCallEvent):
                out += self.tool(e.call)
        return out


async def message_events(served, gen: Generation, parser, log: GuardLog | None = None):
    """`log`: what the tool guard did, reported on message_delta as `hearth`."""
    blocks, output_tokens, last = _Blocks(), 0, None
    start = {"id": f"msg_{gen.request_id}", "type": "message", "role": "assistant", "model": served.name,
             "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage(gen, 0)}
    yield _event({"type": "message_start", "message": start})
    yield _event({"type": "ping"})
    try:
        async for _, out in gen.outputs():
            output_tokens += len(out.new_token_ids)
            events = parser.feed(out.new_text) + (parser.finish() if out.finished else [])
            for event in blocks.events(events):
                yield event
            last = out
    except HearthError as e:
        err = from_hearth_error(e)
        yield named_event("error", error_body("/v1/messages", err.status, err.message))
        return
    for event in blocks.close():
        yield event
    reason = last.finish_reason if last else "stop"
    stop = anthropic_stop(reason, blocks.called, last.stop_reason if last else None)
    delta = {"stop_reason": stop, "stop_sequence": last.stop_reason if stop == "stop_sequence" else None}
    end = {"type": "message_delta", "delta": delta, "usage": {**usage(gen, output_tokens)}}
    yield _event(attach(end, log) if log is not None else end)
    yield _event({"type": "message_stop"})


async def replay_message(message: dict):
    """A whole message as the events a stream of it would have sent (each block in one delta)."""
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    start.pop("hearth", None)
    yield _event({"type": "message_start", "message": start})
    blocks, events = _Blocks(), []
    for b in message["content"]:
        if b["type"] == "tool_use":
            events.append(ToolCallEvent(len(events), ToolCall(b["id"], b["name"], json.dumps(b["input"]))))
        else:
            events.append(ContentDelta(b["text"]) if b["type"] == "text" else ReasoningDelta(b["thinking"]))
    for event in blocks.events(events) + blocks.close():
        yield event
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]}
    end = {"type": "message_delta", "delta": delta, "usage": message["usage"]}
    if "hearth" in message:
        end["hearth"] = message["hearth"]
    yield _event(end)
    yield _event({"type": "message_stop"})
