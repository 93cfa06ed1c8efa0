"""Responses `input` (a string or a list of items), `tools`, `tool_choice` and `text.format` ->
what the chat path takes: chat messages, tools in the chat wire's shape, a StructuredOutput.

Items are a table of kinds (message, function_call, function_call_output, reasoning); an item
without `type` but with `role` is a message, as the API's "easy input" allows. A `reasoning` item
rides on the next assistant turn as its `reasoning_content`."""

from __future__ import annotations

from typing import Any

from hearth.api.media_parts import read_part
from hearth.api.messages import _kind, bad, call_arguments
from hearth.api.responses_output import item_id
from hearth.sampling_params import StructuredOutput

_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
_TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text", "refusal")


def input_messages(given: str | list | None, before: list[dict] = (), images=None) -> list[dict]:
    """`input` -> chat messages (see hearth.api.messages for their shape); `before`: the stored
    conversation it follows (previous_response_id), where its outputs' calls may be; images: the
    request's hearth.api.media_parts.RequestImages, which takes its input_image parts (None: a 400)."""
    if given is None:
        return []
    if isinstance(given, str):
        return [{"role": "user", "content": given}]
    out: list[dict] = list(before)
    pending = {"reasoning": None, "images": images}  # a reasoning item waiting for its assistant turn
    for i, item in enumerate(given):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad(where, f"must be an item object, not {_kind(item)}")
        kind = item.get("type", "message" if "role" in item else None)
        handler = _ITEMS.get(kind) if isinstance(kind, str) else None  # a list is no key: a TypeError was a 500
        if handler is None:
            known = ", ".join(sorted(_ITEMS))
            raise bad(f"{where}.type", f"unknown item type {kind!r}; expected one of {known}")
        handler(item, where, out, pending)
    return out[len(before):]


_ID_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}


def as_items(given: str | list | None) -> list[dict]:
    """`input` as GET /v1/responses/{id}/input_items lists it (call after input_messages checked it):
    each item with its `type` and an `id` (hearth's where the client gave none), a message's text as
    content parts (OpenAI's ResponseInputMessageItem: input_text, output_text in an assistant turn)."""
    if given is None:
        return []
    if isinstance(given, str):
        given = [{"role": "user", "content": given}]
    out = []
    for item in given:
        kind = item.get("type", "message")
        it = {**item, "type": kind, "id": item.get("id") or item_id(_ID_PREFIX[kind])}
        if kind == "message":
            if isinstance(it.get("content"), str):
                part = "output_text" if it["role"] == "assistant" else "input_text"
                it["content"] = [{"type": part, "text": it["content"]}]
            it.setdefault("status", "completed")
        out.append(it)
    return out


def _message(item: dict, where: str, out: list[dict], pending: dict) -> None:
    role = item.get("role")
    if not isinstance(role, str) or role not in _ROLES:
        raise bad(f"{where}.role", f"unknown role {role!r}; expected one of {', '.join(sorted(_ROLES))}")
    m = {"role": _ROLES[role], "content": part_text(item.get("content"), f"{where}.content", pending["images"])}
    if m["role"] == "assistant" and pending["reasoning"] is not None:
        m["reasoning_content"], pending["reasoning"] = pending["reasoning"], None
    out.append(m)


def _function_call(item: dict, where: str, out: list[dict], pending: dict) -> None:
    for key in ("call_id", "name"):
        if not isinstance(item.get(key), str) or not item[key]:
            raise bad(f"{where}.{key}", "is required (a string)")
    if "arguments" not in item:  # required, as OpenAI's ResponseFunctionToolCall has it
        raise bad(f"{where}.arguments", "is required (a string of JSON)")
    arguments = call_arguments(item["arguments"], f"{where}.arguments", lenient=False)
    call = {"id": item["call_id"], "type": "function", "function": {"name": item["name"], "arguments": arguments}}
    last = out[-1] if out else None
    if last is not None and last["role"] == "assistant" and pending["reasoning"] is None:
        last.setdefault("tool_calls", []).append(call)  # parallel calls: one assistant turn
        return
    m = {"role": "assistant", "content": "", "tool_calls": [call]}
    if pending["reasoning"] is not None:
        m["reasoning_content"], pending["reasoning"] = pending["reasoning"], None
    out.append(m)


def _function_call_output(item: dict, where: str, out: list[dict], pending: dict) -> None:
    if not isinstance(item.get("call_id"), str) or not item["call_id"]:
        raise bad(f"{where}.call_id", "is required (a string)")
    output = item.get("output")
    text = output if isinstance(output, str) else part_text(output, f"{where}.output", pending["images"])
    name = _call_name(out, item["call_id"])
    if name is None:  # as OpenAI: an output answers a call made before it
        raise bad(f"{where}.call_id", f"no function_call with call_id {item['call_id']!r} before it "
                                      "(in this input or the previous response)")
    out.append({"role": "tool", "content": text, "tool_call_id": item["call_id"], "name": name})


def _reasoning(item: dict, where: str, out: list[dict], pending: dict) -> None:
    key = "content" if item.get("content") else "summary"  # the reasoning itself, else a summary of it
    pending["reasoning"] = part_text(item.get(key) or [], f"{where}.{key}")


_ITEMS = {"message": _message, "function_call": _function_call,
          "function_call_output": _function_call_output, "reasoning": _reasoning}


def _call_name(messages: list[dict], call_id: str) -> str | None:
    for m in reversed(messages):
        for call in m.get("tool_calls") or []:
            if call["id"] == call_id:
                return call["function"]["name"]
    return None


def part_text(content: Any, where: str, images=None) -> str:
    """A string, or content parts (input_text, output_text, ...) joined with newlines; an input_image is
    its marker there (hearth.api.media_parts)."""
    if isinstance(content, str):
        return content
    if content is None:
        raise bad(where, "is required")
    if not isinstance(content, list):
        raise bad(where, f"must be a string or a list of content parts, not {_kind(content)}")
    texts = []
    for j, part in enumerate(content):
        at = f"{where}[{j}]"
        if not isinstance(part, dict):
            raise bad(at, f"must be a content part object, not {_kind(part)}")
        kind = part.get("type")
        if kind == "input_image":
            texts.append(read_part(part, at, images))
            continue
        if kind not in _TEXT_PARTS:
            if kind in ("input_file", "input_audio"):
                raise bad(f"{at}.type", f"{kind!r} parts are not supported: hearth reads text and images")
            raise bad(f"{at}.type", f"unknown content part type {kind!r}; expected 'input_text', 'output_text' "
                                    "or 'input_image'")
        text = part.get("refusal") if kind == "refusal" else part.get("text")
        if not isinstance(text, str):
            raise bad(f"{at}.text", "must be a string")
        texts.append(text)
    return "\n".join(texts)


def chat_tools(tools: list | None) -> list[dict]:
    """Responses function tools ({type, name, description, parameters}) -> the chat wire's shape."""
    out = []
    for i, t in enumerate(tools or []):
        if not isinstance(t, dict):
            raise bad(f"tools[{i}]", f"must be a tool object, not {_kind(t)}")
        if t.get("type") != "function":
            raise bad(f"tools[{i}].type", f"{t.get('type')!r} tools are not supported; only 'function'")
        if not isinstance(t.get("name"), str) or not t["name"]:
            raise bad(f"tools[{i}].name", "is required (a string)")
        params = t.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise bad(f"tools[{i}].parameters", f"must be a JSON schema object, not {_kind(params)}")
        fn = {"name": t["name"], "description": t.get("description") or "",
              "parameters": params or {"type": "object", "properties": {}}}
        out.append({"type": "function", "function": fn})
    return out


def chat_tool_choice(choice: str | dict | None) -> str | dict | None:
    if not isinstance(choice, dict):
        return choice
    if choice.get("type") != "function":
        raise bad("tool_choice.type", f"{choice.get('type')!r} is not supported; use 'function' with a name")
    if not isinstance(choice.get("name"), str):
        raise bad("tool_choice.name", "is required (a string)")
    return {"type": "function", "function": {"name": choice["name"]}}


def text_format(text) -> StructuredOutput | None:
    """`text.format` (a TextConfig, its types checked) -> a constraint (None for plain text); json_schema
    needs a name and a schema, as OpenAI requires them."""
    fmt = text.format if text is not None else None
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return StructuredOutput(json_object=True)
    if fmt.name is None:
        raise bad("text.format.name", "is required when type is 'json_schema' (a string)")
    if fmt.schema_ is None:
        raise bad("text.format.schema", "is required when type is 'json_schema' (a JSON schema object)")
    return StructuredOutput(json_schema=fmt.schema_)


def with_instructions(instructions: str | None, messages: list[dict]) -> list[dict]:
    """`instructions` as the system message (joined to one the input already opens with)."""
    if not instructions:
        return messages
    if messages and messages[0]["role"] == "system":
        return [{**messages[0], "content": f"{instructions}\n\n{messages[0]['content']}"}, *messages[1:]]
    return [{"role": "system", "content": instructions}, *messages]
