"""A tool call that max_tokens cut off: the output ended (finish_reason "length") inside a call
region, or, when tool_choice forces a call, before it. As OpenAI returns a cut call (and vLLM
streams one), it stays a call: its name and its arguments as far as the model wrote them, marked
`unparsed` unless they happen to be a whole JSON object. It is never closed by repair into a call
the model did not finish (lenient JSON would make `{"tz": "Asia/To` a complete `{"tz": "Asia/To"}`,
and `{` a `{}`), and the call's markup never goes out as content.

The rule (JSON call bodies: hermes, llama3_json, bare_json, mistral's list, JSON in qwen_xml's tags):
- the name is written whole (its closing quote) and is offered: a call of it, with the arguments
  text written after `"arguments":` ("" when none was);
- the name is not whole: with a named tool_choice the grammar was writing that name, so it is the
  call's, arguments ""; with `required` or `auto` there is no call (no name is invented);
- no call: the region is dropped where it is known to be a call (the format's START marker opened
  it, or tool_choice forces a call); a marker-less lead region under `auto` (an output that opens
  with `{`, maybe JSON the user asked for) stays content, as it always did.
- several calls in the region (mistral's list, llama3_json's `;`, a list in a tag): the whole calls
  before the cut one are calls as parsed, then the cut one by the rule above (no name is invented
  for it: a named tool_choice's name only stands in for a region's first call).
A region that is whole but for its END marker parses as usual.

Gemma 4's bodies (`call:NAME{key:value`): the name when written whole and offered, arguments "".

XML bodies (qwen_xml, and hermes' `<function=NAME>`): a region whose last `<function=NAME>` has no
`</function>` is cut inside that call (qwen_xml's lenient reading would make `<parameter=city>\nPa`
a clean `{"city": "Pa"}`). The functions before it are whole calls; the cut one, when NAME is whole
and offered, has as arguments the JSON its parameters so far would open (`{"city": "Pa`: the
parameters closed with `</parameter>` as qwen_xml reads them, the open one's text as written, a
string unless its schema types it otherwise; "" before any `<parameter=`), marked `unparsed`."""

from __future__ import annotations

import json
import re

from hearth.tool_parsers import gemma4, qwen_xml
from hearth.tool_parsers.early_call import EarlyCall, as_written
from hearth.tool_parsers.lenient_json import leading_values, object_error, split_values
from hearth.tool_parsers.rescue import calls_from_json
from hearth.tool_parsers.types import ToolCall, new_call_id, tool_parameters

CUT = "cut off by max_tokens before the arguments were complete"
# a call object's name, written whole (Qwen2.5's doubled brace, a fence and mistral's list allowed)
_NAME = re.compile(r'\s*(?:```(?:json|JSON)?\s*)?\[?\s*\{\{?\s*"name"\s*:\s*"([^"\\]+)"')
_ARGUMENTS = re.compile(r'\s*,\s*"(?:arguments|parameters)"\s*:\s*')


_PARAMETER, _PARAMETER_END = "<parameter=", "</parameter>"


def cut_calls(region: str, tools: list[dict] | None, named: str | None, early: EarlyCall | None) -> list[ToolCall]:
    """The calls a cut-off region holds (see the rule above), the cut one last; [] for none.
    region "": a forced call cut before its region opened (its START marker, or part of it, was all
    there was). `early`: the call a stream announced in this region: its id and name stand, its
    arguments go on from what was sent."""
    if qwen_xml.is_xml(region):
        return _xml_calls(region, tools, named)
    if region.lstrip().startswith(gemma4.CALL):
        return _gemma_calls(region.lstrip(), tools, named)
    values = _call_values(region)
    calls: list[ToolCall] = []
    if early is not None and early.started:  # the region's first call, announced
        calls.append(_call(early.id, early.name, early.cut(region)))
        values = values[1:]
    if len(values) > 1:  # `[{...}, {...` / `{...}; {...`: the whole calls before the cut one
        try:
            calls += [c for v in values[:-1] for c in calls_from_json(v, tools)]
        except ValueError:  # one is not a call: the region is read as one call, as a whole one would be
            values, calls = values[:1], calls[:1]
    if calls and not values:
        return calls
    call = cut_call(values[-1] if len(values) > 1 or calls else region, tools, None if calls else named)
    return calls + ([] if call is None else [call])


def _call_values(region: str) -> list[str]:
    """The JSON values a region holds, one a call (a list's items; its last one may be cut)."""
    values = leading_values(region)
    if len(values) == 1 and values[0].lstrip().startswith("["):
        values = split_values(values[0].lstrip()[1:])
    return values


def cut_call(region: str, tools: list[dict] | None, named: str | None) -> ToolCall | None:
    """The call one cut-off JSON value (or a region holding one) is, or None."""
    head = _NAME.match(region)
    name = head.group(1) if head else None
    if name is not None and tools is not None and name not in tool_parameters(tools):
        name = None
    if name is None:
        return None if named is None else _call(new_call_id(), named, "")
    args = _ARGUMENTS.match(region, head.end())
    return _call(new_call_id(), name, as_written(region[args.end():]) if args else "")


def _call(call_id: str, name: str, arguments: str) -> ToolCall:
    return ToolCall(call_id, name, arguments, CUT if object_error(arguments) else "")


def _xml_calls(region: str, tools: list[dict] | None, named: str | None) -> list[ToolCall]:
    """An XML region cut inside its last function: the whole functions before it, then that one."""
    k = region.rfind(qwen_xml.FUNCTION)
    try:
        calls = qwen_xml.parse(region[:k], tools) if qwen_xml.is_xml(region[:k]) else []
    except ValueError:
        calls = []
    head = re.match(r"<function=([^>\n]+)>", region[k:])
    name = head.group(1).strip() if head else None
    parameters = tool_parameters(tools)
    if name is not None and tools is not None and name not in parameters:
        name = None
    if name is None:
        return calls if calls or named is None else [_call(new_call_id(), named, "")]
    properties = parameters.get(name, {}).get("properties", {})
    return calls + [_call(new_call_id(), name, _xml_arguments(region[k + head.end():], properties))]


def _gemma_calls(region: str, tools: list[dict] | None, named: str | None) -> list[ToolCall]:
    """A Gemma 4 call cut off: its name once written whole (its `{` came) and offered, with no
    arguments (they are not JSON: nothing of them can be passed on as written)."""
    name, brace, _ = region[len(gemma4.CALL):].partition("{")
    name = name.strip() if brace else None
    if name is not None and tools is not None and name not in tool_parameters(tools):
        name = None
    name = name if name is not None else named
    return [] if name is None else [_call(new_call_id(), name, "")]


def _xml_arguments(body: str, properties: dict) -> str:
    """The JSON arguments text the parameters written so far open (`{"city": "Pa`)."""
    if body.lstrip().startswith("{"):  # `<function=NAME>{...` (Llama 3.1's form): JSON as written
        return as_written(body.lstrip())
    parts = body.split(_PARAMETER)[1:]
    pairs = []
    for i, part in enumerate(parts):
        key, sep, raw = part.partition(">")
        if not sep or "\n" in key:  # the key itself was cut
            break
        key, schema = key.strip(), properties.get(key.strip())
        if _PARAMETER_END in raw or i < len(parts) - 1:  # closed (or ended by the next tag), as qwen_xml reads it
            value = json.dumps(qwen_xml.value(raw.split(_PARAMETER_END)[0], schema), ensure_ascii=False)
        else:  # the cut one: its text as written, a string unless typed otherwise
            text = raw[1:] if raw.startswith("\n") else raw
            typed = qwen_xml.kinds(schema)
            value = text if typed and "string" not in typed else json.dumps(text, ensure_ascii=False)[:-1]
        pairs.append(f"{json.dumps(key, ensure_ascii=False)}: {value}")
    return "{" + ", ".join(pairs) if parts else ""
