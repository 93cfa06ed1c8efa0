"""Plain-data messages between the output parsers and the server: a parsed tool call, the parsed
output of a whole response, and the events a streaming parser hands out."""

from __future__ import annotations

import secrets
import string
from dataclasses import dataclass, field
from typing import Union

from hearth.errors import HearthError

_ID_ALPHABET = string.ascii_letters + string.digits


class ToolParserError(HearthError):
    """A tool-call format name or a tool_choice that names something hearth does not know."""


def new_call_id(prefix: str = "call_") -> str:
    """A fresh id in OpenAI's shape (`call_` + 24 letters/digits); Anthropic wants `toolu_`."""
    return prefix + "".join(secrets.choice(_ID_ALPHABET) for _ in range(24))


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call as the OpenAI wire has it. Two calls are equal when they call the same tool with the
    same arguments: the id is a fresh label, not part of what the model said."""
    id: str = field(compare=False)
    name: str
    arguments: str  # a JSON object, as a string (OpenAI's `function.arguments`)
    unparsed: str = field(default="", compare=False)
    """Not empty: a call announced while it was written (a streaming client has its id, name and a
    prefix of its arguments) whose arguments, as the model wrote them, are not JSON (`NaN is not
    JSON`: this says why); `arguments` are then the streamed prefix and the model's own text after
    it, nothing dropped (hearth.tool_parsers.early_call); or a call max_tokens cut off, its arguments
    as far as the model wrote them (hearth.tool_parsers.cut). The guard makes it an invalid_arguments problem."""


@dataclass(frozen=True, slots=True)
class ParsedOutput:
    """A whole response split into its channels."""
    content: str
    tool_calls: list[ToolCall]
    reasoning: str = ""


@dataclass(frozen=True, slots=True)
class ContentDelta:
    """Text for the user, to stream as it comes."""
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """Text of the model's reasoning channel (`reasoning_content` / Anthropic `thinking`)."""
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallEvent:
    """One complete call; `index` is its place among the response's calls (OpenAI's
    `tool_calls[].index`), so clients may take the whole arguments string in one delta."""
    index: int
    call: ToolCall


@dataclass(frozen=True, slots=True)
class ToolCallStart:
    """A call has begun: its id and name are known, its arguments are still being written. The
    ToolCallEvent with the same index follows, with this id and name."""
    index: int
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolCallArgumentsDelta:
    """A piece of a started call's arguments. The pieces of a call, joined, are a prefix of its
    final `arguments` (the ToolCallEvent carries them whole; send only what is still missing)."""
    index: int
    text: str


Event = Union[ContentDelta, ReasoningDelta, ToolCallStart, ToolCallArgumentsDelta, ToolCallEvent]


def arguments_rest(arguments: str, sent: str) -> str:
    """What a streamed call's pieces so far (`sent`) lack of its final arguments. The parser streams
    prefixes, so sent is one; were it not, nothing more is sent (the client's copy stands)."""
    return arguments[len(sent):] if arguments.startswith(sent) else ""


def collect(events: list[Event]) -> ParsedOutput:
    """The non-streaming view of a stream of events: channels concatenated, calls in order."""
    content = "".join(e.text for e in events if isinstance(e, ContentDelta))
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    calls = [e.call for e in events if isinstance(e, ToolCallEvent)]
    return ParsedOutput(content, calls, reasoning)


def tool_function(tool: dict) -> dict:
    """The function part of a tool, whatever wire it came from: OpenAI nests it under `function`,
    Anthropic and plain lists put `name` at the top."""
    fn = tool.get("function")
    return fn if isinstance(fn, dict) else tool


def tool_parameters(tools: list[dict] | None) -> dict[str, dict]:
    """Tool name -> its arguments' JSON schema (OpenAI `parameters`, Anthropic `input_schema`)."""
    out: dict[str, dict] = {}
    for tool in tools or []:
        fn = tool_function(tool)
        if isinstance(fn.get("name"), str):
            schema = fn.get("parameters", fn.get("input_schema"))
            out[fn["name"]] = schema if isinstance(schema, dict) else {}
    return out
