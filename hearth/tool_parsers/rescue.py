"""Turn whatever object a model wrote into a ToolCall, or refuse it. Models mix up key names
across formats (`parameters` for Llama, `input` for Anthropic, `function: {...}` for OpenAI's
wire, arguments as a JSON string), so every known spelling is accepted; a name that is not one of
the request's tools is refused, so that text is never turned into a call nobody offered."""

from __future__ import annotations

import json
from typing import Any

from hearth.tool_parsers.lenient_json import leading_values, loads_lenient, split_values
from hearth.tool_parsers.types import ToolCall, new_call_id, tool_parameters

_NAME_KEYS = ("name", "tool_name", "tool", "function", "function_name")
_ARGUMENT_KEYS = ("arguments", "args", "parameters", "params", "input", "tool_input")
_NAMESPACE = "functions."  # gpt-oss and OpenAI's own traces write functions.NAME


def to_call(obj: Any, tools: list[dict] | None) -> ToolCall:
    """The call `obj` describes; ValueError if it is not one."""
    if not isinstance(obj, dict):
        raise ValueError("a tool call is a JSON object")
    if isinstance(obj.get("function"), dict):  # OpenAI wire: {"type": "function", "function": {...}}
        obj = {**obj, **obj["function"]}
    name = next((obj[k].strip() for k in _NAME_KEYS if isinstance(obj.get(k), str)), "")
    if not name:
        raise ValueError("a tool call needs a name")
    name = _known_name(name, tools)
    key = next((k for k in _ARGUMENT_KEYS if k in obj), None)
    args = obj[key] if key is not None else None
    if key == "parameters" and _is_schema(args, name, tools):
        raise ValueError(f"a definition of {name!r} (its parameters' JSON schema), not a call of it")
    if isinstance(args, str):
        args = loads_lenient(args) if args.strip() else None
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise ValueError(f"the arguments of {name!r} are not a JSON object")
    try:  # allow_nan=False: never Infinity or NaN in the arguments (not JSON); loads_lenient refuses them already
        return ToolCall(new_call_id(), name, json.dumps(args, ensure_ascii=False, allow_nan=False))
    except ValueError:
        raise ValueError(f"the arguments of {name!r} hold a number JSON cannot carry") from None


def calls_from_json(text: str, tools: list[dict] | None) -> list[ToolCall]:
    """Every call in the JSON values at the start of `text` (bare, fenced, or fenced one by one); a
    list value holds several calls. All or nothing: if one of them is not a call, none is, and the
    caller keeps the text. Text after the last value is the model's chatter about its calls and is
    dropped (vLLM's parsers drop all text after the first call)."""
    objects: list[Any] = []
    for value in leading_values(text):
        obj, _ = load_value(value)
        objects += obj if isinstance(obj, list) else [obj]
    if not objects:
        raise ValueError("no JSON object where a tool call should be")
    return [to_call(obj, tools) for obj in objects]


def load_value(value: str) -> tuple[Any, bool]:
    """One JSON value parsed leniently, and whether it was written with doubled braces: Qwen2.5's
    template shows calls as `{{"name": ...}}` and its models copy it, so `{{...}}}` loses one pair
    (an object with one key inside, `{{"a": 1}}`, is not doubled JSON but a set; it gets unwrapped too).
    ValueError when it does not parse either way."""
    doubled = value.startswith("{") and value[1:].lstrip().startswith("{")
    try:
        obj = loads_lenient(value)
    except ValueError:
        if not doubled:
            raise
        obj = None
    if doubled and not (isinstance(obj, dict) and len(obj) > 1):
        inner = value[1:].lstrip()
        values = split_values(inner)
        if not values:
            raise ValueError("an empty doubled brace")
        return loads_lenient(values[0]), True
    return obj, False


def _is_schema(args: Any, name: str, tools: list[dict] | None) -> bool:
    """`parameters` holding an object schema: the tool's definition as the request (or its prompt) wrote
    it, which small models echo before their calls; Llama's calls use the key for arguments, so only a
    schema's shape counts, and not where the tool itself takes arguments named `type` and `properties`."""
    if not (isinstance(args, dict) and args.get("type") == "object" and isinstance(args.get("properties"), dict)):
        return False
    declared = tool_parameters(tools).get(name, {}).get("properties") if tools is not None else None
    return not (isinstance(declared, dict) and "type" in declared and "properties" in declared)


def _known_name(name: str, tools: list[dict] | None) -> str:
    """`name` if the request offers it (or offers no list to check against); ValueError if not."""
    if tools is None:
        return name
    known = tool_parameters(tools)
    if name not in known and name.startswith(_NAMESPACE) and name[len(_NAMESPACE):] in known:
        name = name[len(_NAMESPACE):]
    if name not in known:
        raise ValueError(f"no tool named {name!r}")
    return name
