"""Calls hidden in what the output parser left as text: a call object in the middle of prose or in a
fence, the doubled-brace form Qwen2.5-Coder's template teaches (`{{"name": ..., "arguments": ...}}}`),
`{"get_weather": {...}}`, `<function=NAME>{...}</function>`, ReAct's `Action:` / `Action Input:`,
and an answer that is nothing but `NAME(arg=...)`. Only tools the request offers become calls
(hearth.tool_parsers.rescue.to_call refuses any other name): text is never turned into a call
nobody offered. This runs where no grammar shaped the output; it extends the format parsers'
own rescue (which repairs a call region that the model marked) to calls the model did not mark."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from hearth.tool_parsers.lenient_json import loads_lenient, split_values
from hearth.tool_parsers.rescue import load_value, to_call
from hearth.tool_parsers.types import ToolCall, tool_parameters

_NAME_KEY = r"""\{\s*(\{\s*)?["']?(?:name|tool_name|tool|function|function_name)["']?\s*:"""
_EMPTY_WRAPPER = re.compile(r"```[A-Za-z]*\s*```|<\|?([A-Za-z_\-]*call[A-Za-z_\-]*)\|?>\s*</\|?\1\|?>", re.I)
_FUNCTION_TAG = re.compile(r"<function=([\w.\-]+)>\s*(\{.*?\})\s*</function>", re.DOTALL)
_REACT = re.compile(r"Action\s*:\s*`?([\w.\-]+)`?\s*\n\s*Action\s+Input\s*:\s*", re.I)
_FENCE_LINE = re.compile(r"^\s*```[A-Za-z]*\s*$")
_CALL_END = re.compile(r"(?:\s|```|</\|?[A-Za-z_\-]*call[A-Za-z_\-]*\|?>|Observation\s*:)*", re.I)
"""What may follow the last call of an answer that is a call: layout, a fence's or tag's close, ReAct's
`Observation:` (where the result goes)."""


@dataclass(frozen=True, slots=True)
class Found:
    """One call found in the text, and the span of text it replaces."""
    start: int
    end: int
    call: ToolCall
    form: str


@dataclass(frozen=True, slots=True)
class Rescue:
    calls: list[ToolCall]
    content: str
    """The text without the calls' spans (and the fences or tags left empty around them)."""
    forms: list[str]
    """How each call was written, in the calls' order."""


def rescue_calls(text: str, tools: list[dict] | None) -> Rescue | None:
    """The calls of offered tools in `text`, or None when it holds none, or when text follows the last
    of them: a call ends its answer in every format (the model waits for its result), so an answer that
    goes on after one (`This function will return ...`, `In this example ...`) showed the reader how a
    call would look (Qwen2.5-Coder-0.5B on BFCL irrelevance, where a call is wrong; docs/eval-tools.md,
    2026-12-06, fifteenth session) and stays the text it was, as the server without the guard returns it."""
    if not tools or not text.strip():
        return None
    found: list[Found] = []
    for finder in _FINDERS:
        for f in finder(text, tools):
            if not any(f.start < g.end and g.start < f.end for g in found):
                found.append(f)
    if not found:
        return None
    found.sort(key=lambda f: f.start)
    if not _CALL_END.fullmatch(text, found[-1].end):
        return None  # the answer went on past its calls: they were shown to the reader, not made
    rest, at = [], 0
    for f in found:
        rest.append(text[at:f.start])
        at = f.end
    rest.append(text[at:])
    content = _EMPTY_WRAPPER.sub("", "".join(rest)).strip()
    return Rescue([f.call for f in found], content, [f.form for f in found])


def _call(obj: Any, tools: list[dict]) -> ToolCall | None:
    try:
        call = to_call(obj, tools)
    except (ValueError, TypeError):  # TypeError: a Python literal JSON has no form for (a set, bytes)
        return None
    return call if _its_arguments(call, tools) else None


def _its_arguments(call: ToolCall, tools: list[dict]) -> bool:
    """Whether the arguments name one of the tool's parameters, or it declares none, or there are none:
    an unmarked object carrying an offered name but none of its parameters is a function the model made
    up under that name (Qwen2.5-Coder-0.5B on BFCL irrelevance_3: `find_critical_points` with `slope`,
    which the guard then resampled into a call the model never meant; bare leaves it as text)."""
    declared = tool_parameters(tools).get(call.name, {}).get("properties")
    args = json.loads(call.arguments)
    return not isinstance(declared, dict) or not declared or not args or bool(set(args) & set(declared))


def _json_objects(text: str, tools: list[dict]) -> Iterator[Found]:
    """`{"name": "<tool>", "arguments": {...}}` anywhere (doubled braces too), and the object whose
    one key is an offered tool's name, `{"get_weather": {"city": "Paris"}}`."""
    names = "|".join(re.escape(n) for n in tool_parameters(tools))
    starts = re.compile(f"{_NAME_KEY}|\\{{\\s*[\"'](?:{names})[\"']\\s*:\\s*\\{{")
    at = 0
    while (m := starts.search(text, at)) is not None:
        values = split_values(text[m.start():])
        value = values[0] if values else ""
        hit = _parse_object(value, tools)
        if hit is None:
            at = m.start() + 1
            continue
        call, form = hit
        end = m.start() + len(value)
        yield Found(m.start(), end, call, _in_fence(text, m.start(), form))
        at = end


def _parse_object(value: str, tools: list[dict]) -> tuple[ToolCall, str] | None:
    try:
        obj, doubled = load_value(value)
    except ValueError:
        return None
    if isinstance(obj, dict) and len(obj) == 1:
        (key, args), = obj.items()
        if key in tool_parameters(tools) and isinstance(args, dict):
            call = _call({"name": key, "arguments": args}, tools)
            return (call, "name_as_key") if call else None
    call = _call(obj, tools)
    return (call, "doubled_braces" if doubled else "json_in_prose") if call else None


def _in_fence(text: str, start: int, form: str) -> str:
    before = text[:start].rstrip()
    return "fenced_json" if form == "json_in_prose" and re.search(r"```[A-Za-z]*$", before) else form


def _function_tags(text: str, tools: list[dict]) -> Iterator[Found]:
    """Llama 3.1's `<function=NAME>{...}</function>` written where the format is another."""
    for m in _FUNCTION_TAG.finditer(text):
        try:
            call = _call({"name": m.group(1), "arguments": loads_lenient(m.group(2))}, tools)
        except ValueError:
            call = None
        if call:
            yield Found(m.start(), m.end(), call, "function_tag")


def _react(text: str, tools: list[dict]) -> Iterator[Found]:
    """ReAct agents' `Action: NAME` then `Action Input: {...}`."""
    for m in _REACT.finditer(text):
        values = split_values(text[m.end():])
        if not values:
            continue
        try:
            call = _call({"name": m.group(1), "arguments": loads_lenient(values[0])}, tools)
        except ValueError:
            call = None
        if call:
            yield Found(m.start(), m.end() + len(values[0]), call, "react")


def _python_calls(text: str, tools: list[dict]) -> Iterator[Found]:
    """An answer that is only `NAME(a=1, ...)` lines (fenced or in backticks): each an offered tool
    with literal arguments. A call mentioned inside a sentence is not taken: it may be an example."""
    lines = [m for m in re.finditer(r"[^\n]+", text) if m.group().strip() and not _FENCE_LINE.match(m.group())]
    calls = [_python_call(m.group().strip().strip("`").strip(), tools) for m in lines]
    if calls and all(calls):
        for m, call in zip(lines, calls):
            yield Found(m.start(), m.end(), call, "python_call")


_NOT_LITERAL = (ValueError, TypeError, SyntaxError, RecursionError, MemoryError)
"""What ast.parse / ast.literal_eval raise on a hostile line (`{[1]: 2}`: unhashable, TypeError;
deep nesting): not a call, never a 500."""


def _python_call(line: str, tools: list[dict]) -> ToolCall | None:
    try:
        node = ast.parse(line, mode="eval").body
    except _NOT_LITERAL:
        return None
    params = tool_parameters(tools)
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.func.id not in params:
        return None
    order = list((params[node.func.id].get("properties") or {}))
    try:
        if len(node.args) > len(order) or any(kw.arg is None for kw in node.keywords):
            return None  # more positional values than parameters, or **kwargs
        args = {order[i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
        args.update({kw.arg: ast.literal_eval(kw.value) for kw in node.keywords})
    except _NOT_LITERAL:
        return None
    return _call({"name": node.func.id, "arguments": args}, tools)


_FINDERS: tuple[Callable[[str, list[dict]], Iterator[Found]], ...] = (
    _function_tags, _react, _json_objects, _python_calls)


def described(rescue: Rescue) -> dict:
    """The event detail: which calls came from which form."""
    return {"calls": [{"name": c.name, "from": form} for c, form in zip(rescue.calls, rescue.forms)]}
