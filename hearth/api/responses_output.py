"""Parser events -> Responses output items, and the typed stream events that build them.

One builder serves both paths: streamed, its events go out as SSE; whole, only the items are kept.
Items open as channel events arrive (reasoning, message text, function calls) and close when the
channel changes or the output ends: one item at a time, added, filled and done before the next is added,
as OpenAI streams them. Every event carries the `sequence_number` the caller stamps."""

from __future__ import annotations

import uuid

from hearth.api.messages import template_arguments
from hearth.tool_parsers import (ContentDelta, ReasoningDelta, ToolCallArgumentsDelta, ToolCallEvent, ToolCallStart,
                                 arguments_rest)


def item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class OutputBuilder:
    def __init__(self):
        self.items: list[dict] = []
        self._open: dict | None = None  # the item being filled
        self._calls: dict[int, dict] = {}  # parser call index -> its function_call item
        self.status = "completed"  # "incomplete" when cut by max_output_tokens
        self._logprobs: list[dict] = []  # the current feed's, until its message text takes them

    @property
    def called(self) -> bool:
        return bool(self._calls)

    def feed(self, events: list, logprobs: list[dict] = ()) -> list[dict]:
        """logprobs: what this feed's message text carries (hearth.api.responses_options.MessageLogprobs)."""
        self._logprobs = list(logprobs)
        out: list[dict] = []
        for e in events:
            if isinstance(e, ContentDelta) and e.text:
                out += self._text("message", e.text)
            elif isinstance(e, ReasoningDelta) and e.text:
                out += self._text("reasoning", e.text)
            elif isinstance(e, ToolCallStart):
                out += self._call_start(e.index, e.id, e.name)
            elif isinstance(e, ToolCallArgumentsDelta):
                out += self._call_arguments(e.index, e.text)
            elif isinstance(e, ToolCallEvent):
                out += self._call_done(e)
        return out

    def close(self) -> list[dict]:
        item, self._open = self._open, None
        if item is None:
            return []
        index = self.items.index(item)
        if item["type"] == "function_call":  # a streamed call the next item (or the end) closes: all of it is sent
            return self._call_closed(item, self.status)
        item["status"] = self.status
        if item["type"] == "message":
            part = item["content"][0]
            head = {"item_id": item["id"], "output_index": index, "content_index": 0}
            return [{"type": "response.output_text.done", **head, "text": part["text"], "logprobs": part["logprobs"]},
                    {"type": "response.content_part.done", **head, "part": part},
                    {"type": "response.output_item.done", "output_index": index, "item": item}]
        if item["type"] == "reasoning":
            part = item["content"][0]
            head = {"item_id": item["id"], "output_index": index, "content_index": 0}
            return [{"type": "response.reasoning_text.done", **head, "text": part["text"]},
                    {"type": "response.content_part.done", **head, "part": part},
                    {"type": "response.output_item.done", "output_index": index, "item": item}]
        return []

    def _add(self, item: dict) -> list[dict]:
        self.items.append(item)
        return [{"type": "response.output_item.added", "output_index": len(self.items) - 1, "item": dict(item)}]

    def _text(self, kind: str, text: str) -> list[dict]:
        out: list[dict] = []
        if self._open is None or self._open["type"] != kind:
            out += self.close()
            out += self._open_text(kind)
        item = self._open
        index = len(self.items) - 1
        if kind == "message":
            logprobs, self._logprobs = self._logprobs, []
            item["content"][0]["text"] += text
            item["content"][0]["logprobs"] += logprobs
            return out + [{"type": "response.output_text.delta", "item_id": item["id"], "output_index": index,
                           "content_index": 0, "delta": text, "logprobs": logprobs}]
        item["content"][0]["text"] += text
        return out + [{"type": "response.reasoning_text.delta", "item_id": item["id"], "output_index": index,
                       "content_index": 0, "delta": text}]

    def _open_text(self, kind: str) -> list[dict]:
        if kind == "message":
            item = {"id": item_id("msg"), "type": "message", "status": "in_progress", "role": "assistant",
                    "content": []}
            out = self._add(item)
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            item["content"].append(part)
            self._open = item
            return out + [{"type": "response.content_part.added", "item_id": item["id"],
                           "output_index": len(self.items) - 1, "content_index": 0, "part": dict(part)}]
        # the model's own reasoning is the item's content (reasoning_text), as vLLM gives an open model's: a
        # summary is what OpenAI's models write about theirs, which hearth does not make
        item = {"id": item_id("rs"), "type": "reasoning", "status": "in_progress", "summary": [], "content": []}
        out = self._add(item)
        part = {"type": "reasoning_text", "text": ""}
        item["content"].append(part)
        self._open = item
        return out + [{"type": "response.content_part.added", "item_id": item["id"],
                       "output_index": len(self.items) - 1, "content_index": 0, "part": dict(part)}]

    def _call_start(self, index: int, call_id: str, name: str) -> list[dict]:
        out = self.close()
        item = {"id": item_id("fc"), "type": "function_call", "status": "in_progress", "call_id": call_id,
                "name": name, "arguments": ""}
        self._calls[index] = self._open = item
        return out + self._add(item)

    def _call_arguments(self, index: int, text: str) -> list[dict]:
        item = self._calls[index]
        if item is not self._open:  # ended when the next item opened (OpenAI sends one item at a time)
            return []
        item["arguments"] += text
        return [{"type": "response.function_call_arguments.delta", "item_id": item["id"],
                 "output_index": self.items.index(item), "delta": text}]

    def _call_done(self, e: ToolCallEvent) -> list[dict]:
        """A call's end. A streamed call whose item the next item closed already stays as it was sent (the
        guard streams only calls it will not change: hearth.api.guard_stream)."""
        out = [] if e.index in self._calls else self._call_start(e.index, e.call.id, e.call.name)
        item = self._calls[e.index]
        if item is not self._open:
            return out
        rest = arguments_rest(e.call.arguments, item["arguments"])
        if rest:
            out += self._call_arguments(e.index, rest)
        self._open = None
        item["arguments"] = e.call.arguments
        # arguments that are not JSON (cut by max_tokens, or broken): the call is not complete
        return out + self._call_closed(item, "incomplete" if e.call.unparsed else "completed")

    def _call_closed(self, item: dict, status: str) -> list[dict]:
        item["status"] = status
        index = self.items.index(item)
        return [{"type": "response.function_call_arguments.done", "item_id": item["id"], "output_index": index,
                 "name": item["name"], "arguments": item["arguments"]},
                {"type": "response.output_item.done", "output_index": index, "item": dict(item)}]


def assistant_messages(items: list[dict]) -> list[dict]:
    """Output items -> chat messages for the stored conversation (one assistant turn)."""
    m: dict = {"role": "assistant", "content": ""}
    for item in items:
        if item["type"] == "reasoning":
            m["reasoning_content"] = item["content"][0]["text"]
        elif item["type"] == "message":
            m["content"] += item["content"][0]["text"]
        elif item["type"] == "function_call":
            m.setdefault("tool_calls", []).append({"id": item["call_id"], "type": "function", "function": {
                "name": item["name"], "arguments": template_arguments(item["arguments"])}})
    return [m]
