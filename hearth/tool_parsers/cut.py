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
A region that is whole but for its END marker parses as usual. XML bodies (`<function=NAME>`) keep
qwen_xml's own reading of a cut region."""

from __future__ import annotations

import re

from hearth.tool_parsers.early_call import EarlyCall, as_written
from hearth.tool_parsers.lenient_json import loads
from hearth.tool_parsers.types import ToolCall, new_call_id, tool_parameters

CUT = "cut off by max_tokens before the arguments were complete"
# a call object's name, written whole (Qwen2.5's doubled brace, a fence and mistral's list allowed)
_NAME = re.compile(r'\s*(?:```(?:json|JSON)?\s*)?\[?\s*\{\{?\s*"name"\s*:\s*"([^"\\]+)"')
_ARGUMENTS = re.compile(r'\s*,\s*"(?:arguments|parameters)"\s*:\s*')


def cut_call(region: str, tools: list[dict] | None, named: str | None, early: EarlyCall | None) -> ToolCall | None:
    """The call a cut-off region holds (see the rule above), or None. region "": a forced call cut
    before its region opened (its START marker, or part of it, was all there was). `early`: the
    call a stream announced in this region: its id and name stand, its arguments go on from what was sent."""
    if early is not None and early.started:
        return _call(early.id, early.name, early.cut(region))
    head = _NAME.match(region)
    name = head.group(1) if head else None
    if name is not None and tools is not None and name not in tool_parameters(tools):
        name = None
    if name is None:
        return None if named is None else _call(new_call_id(), named, "")
    args = _ARGUMENTS.match(region, head.end())
    return _call(new_call_id(), name, as_written(region[args.end():]) if args else "")


def _call(call_id: str, name: str, arguments: str) -> ToolCall:
    try:
        whole = isinstance(loads(arguments), dict)
    except ValueError:
        whole = False
    return ToolCall(call_id, name, arguments, "" if whole else CUT)
