"""Gemma 4 tool calls: the function's name, then its arguments in Gemma's own object syntax, not JSON
(keys bare, strings between `<|"|>` marks, which the GGUF keeps printable):

    <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:2}<tool_call|>

A value is a `<|"|>`-quoted string, an object, a list, or a bare scalar: a JSON number, true, false or
null (Jinja writes Python's None, True and False the same way). Where the tool's schema types a
parameter `string`, a bare scalar is kept as the text it was (a zip code `01234` stays a string). An
output cut off inside the arguments closes at its end (what was written is the call)."""

from __future__ import annotations

import json
from typing import Any

from hearth.tool_parsers.qwen_xml import kinds
from hearth.tool_parsers.rescue import to_call
from hearth.tool_parsers.types import ToolCall, tool_parameters

START = "<|tool_call>"
END = "<tool_call|>"
CALL = "call:"
QUOTE = '<|"|>'
_SCALARS = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}


def parse(text: str, tools: list[dict] | None, strict: bool = False) -> list[ToolCall]:
    """The call in the text between START and END; ValueError if it holds none. strict: an output
    cut off inside the arguments is an error too."""
    body = text.strip()
    if not body.startswith(CALL):
        raise ValueError("no call: in the region")
    brace = body.find("{")
    if brace < 0:
        raise ValueError("no arguments")
    name = body[len(CALL):brace].strip()
    args, end = _Reader(body, brace, strict).object()
    if body[end:].strip():
        raise ValueError(f"text after the arguments: {body[end:end + 20]!r}")
    properties = tool_parameters(tools).get(name, {}).get("properties", {})
    typed = {key: _typed(value, properties.get(key)) for key, value in args.items()}
    return [to_call({"name": name, "arguments": typed}, tools)]


def is_open(region: str) -> bool:
    """Whether a region is a Gemma call cut off inside its arguments (whole but for END is not)."""
    if not region.lstrip().startswith(CALL):
        return False
    try:
        parse(region, None, strict=True)
    except ValueError:
        return True
    return False


def _typed(value: Any, schema: Any) -> Any:
    """A parameter's value as its schema types it: a bare scalar stays text for a `string` parameter."""
    if isinstance(value, tuple):  # (parsed, raw text) of a bare scalar
        parsed, raw = value
        return raw if kinds(schema) == {"string"} else parsed
    return _plain(value)


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return value[0]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


class _Reader:
    """A recursive-descent reader of one Gemma value; bare scalars come back as (value, raw text)."""

    def __init__(self, text: str, pos: int, strict: bool = False):
        self.text, self.pos, self.strict = text, pos, strict

    def value(self) -> Any:
        self._space()
        if self.text.startswith(QUOTE, self.pos):
            end = self.text.find(QUOTE, self.pos + len(QUOTE))
            if end < 0 and self.strict:
                raise ValueError("an unclosed string")
            end = len(self.text) if end < 0 else end  # cut off: the rest is the string
            s, self.pos = self.text[self.pos + len(QUOTE):end], end + len(QUOTE)
            return s
        if self.text.startswith("{", self.pos):
            return self.object()[0]
        if self.text.startswith("[", self.pos):
            return self._list()
        return self._scalar()

    def object(self) -> tuple[dict, int]:
        """The object at pos ('{'): (its members, the index past its '}')."""
        self.pos += 1
        out: dict[str, Any] = {}
        while True:
            self._space()
            if self._take("}") or self._at_end():  # the end closes what a cut left open
                return out, self.pos
            key = self.value() if self.text.startswith(QUOTE, self.pos) else self._key()
            self._space()
            if not self._take(":"):
                raise ValueError(f"no ':' after the key {key!r}")
            out[str(_plain(key))] = self.value()
            self._space()
            if not self._take(",") and not self.text.startswith("}", self.pos) and not self._at_end():
                raise ValueError(f"no ',' or '}}' at {self.pos}")

    def _list(self) -> list:
        self.pos += 1
        out = []
        while True:
            self._space()
            if self._take("]") or self._at_end():
                return out
            out.append(self.value())
            self._space()
            if not self._take(",") and not self.text.startswith("]", self.pos) and not self._at_end():
                raise ValueError(f"no ',' or ']' at {self.pos}")

    def _key(self) -> str:
        end = self.pos
        while end < len(self.text) and self.text[end] not in ":}":
            end += 1
        key, self.pos = self.text[self.pos:end].strip(), end
        if not key:
            raise ValueError("an empty key")
        return key

    def _scalar(self) -> tuple[Any, str]:
        end = self.pos
        while end < len(self.text) and self.text[end] not in ",}]":
            end += 1
        raw, self.pos = self.text[self.pos:end].strip(), end
        if not raw:
            raise ValueError("a missing value")
        if raw in _SCALARS:
            return _SCALARS[raw], raw
        try:
            number = json.loads(raw)
        except ValueError:  # a bare word: the model's text
            return raw, raw
        return (number, raw) if isinstance(number, (int, float)) else (raw, raw)

    def _at_end(self) -> bool:
        """The text ended inside a value: closes it, unless strict."""
        if self.pos < len(self.text):
            return False
        if self.strict:
            raise ValueError("cut off inside the arguments")
        return True

    def _space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t\r\n":
            self.pos += 1

    def _take(self, char: str) -> bool:
        if self.text.startswith(char, self.pos):
            self.pos += 1
            return True
        return False


def history(messages: list[dict], template_source: str) -> list[dict]:
    """Chat history as an older Gemma 4 template reads it (hearth.api.chat_template applies it): one that
    knows no `role: tool` messages (the first GGUFs' templates; the official one now reads both) takes an
    assistant turn's results in its own `tool_responses` ({name, response}: the result's JSON parsed where
    it is JSON), and its answer after them in the same turn, as llama.cpp's compatibility step does."""
    if _READS_TOOL_MESSAGES in template_source:
        return messages
    out: list[dict] = []
    i = 0
    while i < len(messages):
        m = messages[i]
        i += 1
        calls = m.get("tool_calls") if m.get("role") == "assistant" else None
        if not calls:
            out.append(m)
            continue
        responses = []
        while i < len(messages) and messages[i].get("role") == "tool":
            responses.append(_response(messages[i], calls, len(responses)))
            i += 1
        turn = {**m, "tool_responses": responses}
        after = messages[i] if i < len(messages) else None
        if after is not None and after.get("role") == "assistant" and not after.get("tool_calls") and after.get("content"):
            turn["content"], i = after["content"], i + 1
        out.append(turn)
    return out


_READS_TOOL_MESSAGES = "{#- OpenAI Chat Completions:"
"""What the official template says where it reads `role: tool` messages (llama.cpp's test for an older one)."""


def _response(message: dict, calls: list[dict], k: int) -> dict:
    """A tool message as a `tool_responses` entry: named by the call in its place, else by its tool_call_id."""
    name = (calls[k].get("function") or {}).get("name") if k < len(calls) else None
    content = message.get("content")
    try:
        response = json.loads(content) if isinstance(content, str) else content
    except ValueError:
        response = content
    return {"name": name or message.get("tool_call_id", ""), "response": response}
