"""Ollama chat messages -> OpenAI-shaped messages, which hearth.api.messages then checks and turns into
the template's dicts (the indices are kept, so errors name `messages[2].tool_calls[0].function.name`).

Ollama's message: {role, content, thinking?, images?, tool_calls?: [{id?, function: {name, arguments:
an object}}], tool_name?, tool_call_id?}. Roles are read lowercased, as Ollama reads them. A tool result
names its tool (`tool_name`) rather than a call id: it answers the first call of that name the assistant
turn before it made and no earlier result answered (else the first unanswered call), so a template that
pairs results with calls by id sees them paired."""

from __future__ import annotations

from typing import Any

from hearth.api.media_parts import text_only
from hearth.api.messages import _kind, bad, check_messages, openai_messages


def ollama_messages(messages: list[Any], images=None) -> list[dict]:
    """The template dicts of hearth.api.messages.openai_messages (wire rules, not empty). A message's
    `images` (base64) go to `images` (hearth.api.media_parts.RequestImages), their markers ahead of its
    text, as Ollama puts them; None: they are a 400."""
    check_messages(messages)
    out: list[dict] = []
    open_calls: list[dict] = []  # the last assistant turn's calls no tool result answered yet
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        role = m.get("role")
        role = role.lower() if isinstance(role, str) else role
        msg: dict = {"role": role, "content": m.get("content") if m.get("content") is not None else ""}
        if m.get("images"):
            msg["content"] = _with_images(m["images"], msg["content"], f"{where}.images", images)
        if role == "assistant":
            if m.get("thinking") is not None:
                msg["reasoning_content"] = m["thinking"]
            if m.get("tool_calls"):
                msg["tool_calls"] = _calls(m["tool_calls"], where, i)
            open_calls = list(msg.get("tool_calls", []))
        elif role == "tool":
            name = m.get("tool_name", m.get("name"))
            if name is not None and not isinstance(name, str):
                raise bad(f"{where}.tool_name", f"must be a string, not {_kind(name)}")
            msg["tool_call_id"] = m.get("tool_call_id") or _answered(open_calls, name, i)
            if name:
                msg["name"] = name
        out.append(msg)
    return openai_messages(out, images=images)


def _with_images(given: Any, content: Any, where: str, images) -> Any:
    if images is None:
        raise text_only(where)
    images.require(where)
    if not isinstance(given, list):
        raise bad(where, f"must be a list of base64 strings, not {_kind(given)}")
    if not isinstance(content, str):
        raise bad(where.removesuffix(".images") + ".content", f"must be a string, not {_kind(content)}")
    return "".join(images.add_b64(f"{where}[{j}]", x) for j, x in enumerate(given)) + content


def _calls(calls: Any, where: str, i: int) -> Any:
    """Ollama's calls as OpenAI's (an id where none was given; arguments stay the object they are)."""
    if not isinstance(calls, list):  # the tool results after it pair with these: named here, not a 500 there
        raise bad(f"{where}.tool_calls", f"must be a list, not {_kind(calls)}")
    out = []
    for j, call in enumerate(calls):
        if not isinstance(call, dict):
            raise bad(f"{where}.tool_calls[{j}]", f"must be an object, not {_kind(call)}")
        out.append({"type": "function", **call, "id": call.get("id") or f"call_{i}_{j}"})
    return out


def _answered(open_calls: list[dict], name: str | None, i: int) -> str:
    """The id of the open call a result of tool `name` answers (removed from the open ones)."""
    for k, call in enumerate(open_calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if name is None or (isinstance(fn, dict) and fn.get("name") == name):
            return open_calls.pop(k)["id"]
    if open_calls and isinstance(open_calls[0], dict):
        return open_calls.pop(0)["id"]
    return f"call_{name or i}"  # a result with no call before it: paired with nothing, as OpenAI's route allows
