"""OpenAI chat messages -> the plain dicts chat templates read, checked by hand so that a bad
message is answered with the exact field (`messages[2].content[0].type`) and why.

A template message is {"role", "content": str, and optionally "tool_calls" (arguments as a dict
when they parse as a JSON object, else the client's raw string), "tool_call_id", "name",
"reasoning_content"}. History with malformed tool-call arguments is accepted as it is.

The library (LLM.chat) reads messages with wire=False: Hugging Face's chat-template convention, where
a tool message needs no tool_call_id (OpenAI's wire rule) and keys this module does not know pass
through to the template, which may read them (apply_chat_template hands messages over as given)."""

from __future__ import annotations

import json
from typing import Any

from hearth.api.errors import APIError
from hearth.api.media_parts import read_part
from hearth.loader.tokenizer import lone_surrogate

ROLES = {"system", "developer", "user", "assistant", "tool", "function"}
# the keys _openai_message reads and rewrites; any other passes through when wire=False
KNOWN_KEYS = {"role", "content", "tool_calls", "function_call", "name", "tool_call_id", "reasoning_content",
              "reasoning"}


def bad(param: str, why: str) -> APIError:
    return APIError(400, f"{param}: {why}", param=param)


def check_messages(messages: Any, param: str = "messages") -> None:
    if not isinstance(messages, list):
        raise bad(param, f"must be a list of message objects, not {_kind(messages)}")
    if not messages:
        raise bad(param, "must hold at least one message")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise bad(f"{param}[{i}]", f"must be a message object, not {_kind(m)}")


def openai_messages(messages: list[dict], *, wire: bool = True, images=None) -> list[dict]:
    """wire=True: OpenAI's rules, as the server routes apply them (unknown keys dropped, as vLLM does);
    wire=False: the chat-template convention the library follows (see the module docstring).
    images: the request's hearth.api.media_parts.RequestImages, which takes its image parts (their
    markers in the text); None: an image part is a 400."""
    check_messages(messages)
    out = [_openai_message(m, f"messages[{i}]", wire, images) for i, m in enumerate(messages)]
    if not wire:  # the template still sees what the caller wrote beside the keys read here
        out = [{**{k: v for k, v in m.items() if k not in KNOWN_KEYS}, **o} for m, o in zip(messages, out)]
    return out


def _openai_message(m: dict, where: str, wire: bool = True, images=None) -> dict:
    role = m.get("role")
    if role is None:
        raise bad(f"{where}.role", "is required")
    if not isinstance(role, str):  # a list or object was looked up in ROLES: a TypeError, a 500
        raise bad(f"{where}.role", f"must be a string, not {_kind(role)}")
    if role not in ROLES:
        raise bad(f"{where}.role", f"unknown role {role!r}; expected one of {', '.join(sorted(ROLES))}")
    if role == "function":  # legacy: a function's result, answered by name
        if not isinstance(m.get("name"), str):
            raise bad(f"{where}.name", "is required for a function message")
        return {"role": "tool", "content": text_content(m.get("content"), f"{where}.content", optional=True,
                                                        images=images),
                "name": m["name"], "tool_call_id": legacy_call_id(m["name"])}
    out: dict = {"role": "system" if role == "developer" else role}
    tool_calls = m.get("tool_calls") if role == "assistant" else None
    if role == "assistant" and tool_calls is None and m.get("function_call") is not None:  # legacy
        fc = m["function_call"]
        name = fc.get("name") if isinstance(fc, dict) else None
        tool_calls = [{"id": legacy_call_id(name), "type": "function", "function": fc}]
    optional = role == "assistant" and (tool_calls or m.get("content") is None)
    out["content"] = text_content(m.get("content"), f"{where}.content", optional=optional, images=images)
    if tool_calls:
        out["tool_calls"] = history_tool_calls(tool_calls, f"{where}.tool_calls")
    for key in ("name", "tool_call_id"):
        if isinstance(m.get(key), str):
            out[key] = m[key]
        elif m.get(key) is not None:  # strict, as OpenAI reads it: a number was dropped without a word
            raise bad(f"{where}.{key}", f"must be a string, not {_kind(m[key])}")
    if wire and role == "tool" and "tool_call_id" not in out:  # OpenAI's rule; HF's tool messages carry a name
        raise bad(f"{where}.tool_call_id", "is required for a tool message")
    reasoning = m.get("reasoning_content", m.get("reasoning"))
    if role == "assistant" and isinstance(reasoning, str):
        out["reasoning_content"] = reasoning
    return out


def text_content(content: Any, where: str, optional: bool = False, images=None) -> str:
    """A string, or a list of text parts joined with newlines (vLLM's "string" content format; none beside
    an image, _joined); an image part is its marker there, its image added to `images` (hearth.api.media_parts)."""
    if content is None:
        if optional:
            return ""
        raise bad(where, "is required")
    if isinstance(content, str):
        return _valid(content, where)
    if not isinstance(content, list):
        raise bad(where, f"must be a string or a list of content parts, not {_kind(content)}")
    texts, images_at = [], set()
    for j, part in enumerate(content):
        at = f"{where}[{j}]"
        if isinstance(part, str):
            texts.append(_valid(part, at))
            continue
        if not isinstance(part, dict):
            raise bad(at, f"must be a content part object, not {_kind(part)}")
        kind = part.get("type")
        if kind in ("text", "input_text") and isinstance(part.get("text"), str):
            texts.append(_valid(part["text"], f"{at}.text"))
        elif kind in ("text", "input_text"):
            raise bad(f"{at}.text", "must be a string")
        elif (marker := read_part(part, at, images)) is not None:
            texts.append(marker)
            images_at.add(len(texts) - 1)
        elif kind in ("input_audio", "file", "document", "input_file"):
            raise bad(f"{at}.type", f"{kind!r} parts are not supported: hearth reads text and images")
        else:
            raise bad(f"{at}.type", f"unknown content part type {kind!r}; expected 'text' or 'image_url'")
    return _joined(texts, images_at)


def _joined(texts: list[str], images_at: set[int]) -> str:
    """Text parts joined with newlines, none beside an image's marker: the image brings its own layout
    (HF's processors: Gemma3's "\n\n<start_of_image>...<end_of_image>\n\n" right against the text).
    llama.cpp's server joins its marker with "\n" like any text part: hearth follows HF here."""
    out = texts[:1]
    for i in range(1, len(texts)):
        out += ([] if i in images_at or i - 1 in images_at else ["\n"]) + [texts[i]]
    return "".join(out)


def _valid(text: str, where: str) -> str:
    """A lone surrogate is refused here, where the field is known: the tokenizer's refusal named none."""
    if why := lone_surrogate(text):
        raise bad(where, why)
    return text


def legacy_call_id(name) -> str:
    """The id that pairs a legacy function_call with the `function` message answering it (by name)."""
    return f"call_{name}"


def history_tool_calls(calls: Any, where: str) -> list[dict]:
    if not isinstance(calls, list):
        raise bad(where, f"must be a list, not {_kind(calls)}")
    out = []
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise bad(f"{where}[{j}].function.name", "is required (a string)")
        if call.get("type", "function") != "function":  # OpenAI's one type of call (absent: vLLM's default)
            raise bad(f"{where}[{j}].type", f"must be 'function', got {call['type']!r}")
        call_id = call.get("id")
        if call_id is not None and not isinstance(call_id, str):  # OpenAI refuses `"id": 5`; str() hid it
            raise bad(f"{where}[{j}].id", f"must be a string, not {_kind(call_id)}")
        arguments = call_arguments(fn.get("arguments"), f"{where}[{j}].function.arguments", lenient=True)
        out.append({"id": call_id or f"call_{j}", "type": "function",
                    "function": {"name": fn["name"], "arguments": arguments}})
    return out


def call_arguments(arguments: Any, where: str, *, lenient: bool) -> Any:
    """A history call's `arguments`, checked, as templates read them. OpenAI's are a JSON string;
    lenient (the chat route) takes an object or none too, as vLLM does (transformers' convention);
    any other type was str()-ed into arguments no call had, where OpenAI answers 400."""
    if isinstance(arguments, str) or (lenient and (arguments is None or isinstance(arguments, dict))):
        return template_arguments(arguments)
    raise bad(where, f"must be a string of JSON{' (or an object)' if lenient else ''}, not {_kind(arguments)}")


def template_arguments(arguments: Any) -> Any:
    """Templates expect a dict (`arguments | tojson`); a string that is no JSON object stays raw."""
    if isinstance(arguments, dict):
        return arguments
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            return arguments
        return parsed if isinstance(parsed, dict) else arguments
    return str(arguments)


def _kind(x: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", type(None): "null", bool: "a boolean",
            int: "a number", float: "a number"}.get(type(x), type(x).__name__)
