"""Anthropic messages (system, content blocks: text, tool_use, tool_result, thinking) -> the
template dicts of hearth.api.messages: tool_use becomes an assistant tool call, each tool_result a
"tool" message (with is_error: True where the block has it, and its text marked as an error: ERROR_MARK),
thinking the assistant's reasoning_content."""

from __future__ import annotations

import json
from typing import Any

from hearth.api.media_parts import read_part
from hearth.api.messages import _joined, _kind, bad, check_messages, template_arguments, text_content
from hearth.tool_guard.repeats import tool_error

ROLES = ("user", "assistant")
ERROR_MARK = "Error: "
"""Opens an is_error result's text where it does not already read as an error (tool_error): chat
templates have no field for it (OpenAI's tool message has none), so the model sees it in the text,
as in Anthropic's own examples of failed tool results ("Error: Missing required 'location' parameter")."""


def anthropic_messages(messages: list[dict], system: Any = None, images=None) -> list[dict]:
    """Anthropic's rules checked as its API answers them (400s naming the field) on user turns: no empty
    content, no empty or whitespace-only text block. Assistant turns pass as they are, empty ones
    dropped: they echo what a model answered, and a small model's empty or whitespace-only answer
    must come back without a 400 (an empty final one prefills nothing). Consecutive user turns are
    one turn, and so are consecutive assistant turns, as Anthropic combines them (a template that wants roles to alternate renders them). A
    first assistant turn passes, as Anthropic's own API takes it (its Bedrock endpoint refuses it). A
    tool_result must answer a tool_use of the assistant turn before it, as Anthropic's API requires.
    images: the request's hearth.api.media_parts.RequestImages, which takes its image blocks (user turns
    and tool results: their markers in the text); None: an image block is a 400."""
    check_messages(messages)
    out: list[dict] = []
    if system is not None:
        text = text_content(system, "system")
        if text:
            out.append({"role": "system", "content": text})
    calls: set[str] = set()  # the tool_use ids of the last assistant turn: what a tool_result may answer
    previous = None
    for i, m in enumerate(messages):
        turn = _message(m, f"messages[{i}]", calls, images)
        if m.get("role") == "assistant":  # consecutive assistant messages are one turn, as user ones are
            made = {c["id"] for t in turn for c in t.get("tool_calls", ())}
            calls = calls | made if previous == "assistant" else made
        previous = m.get("role")
        out += turn
    if not any(m["role"] != "system" for m in out):  # only empty assistant turns: nothing to answer
        raise bad("messages", "all messages must have non-empty content except for the optional final "
                              "assistant message")
    return _combined(out)


def _message(m: dict, where: str, calls: set[str], images=None) -> list[dict]:
    role = m.get("role")
    if role is None:
        raise bad(f"{where}.role", "is required")
    if role not in ROLES:
        hint = " (a system prompt goes in the top-level `system` field)" if role == "system" else ""
        raise bad(f"{where}.role", f"unknown role {role!r}; expected 'user' or 'assistant'{hint}")
    content = m.get("content")
    if content == "" or content == []:
        if role == "assistant":  # an empty answer echoed back, or an empty prefill: no turn
            return []
        raise bad(f"{where}.content", "all messages must have non-empty content except for the optional final "
                                      "assistant message")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        why = "is required" if content is None else f"must be a string or a list of content blocks, not {_kind(content)}"
        raise bad(f"{where}.content", why)
    for j, block in enumerate(content):
        if not isinstance(block, dict):
            raise bad(f"{where}.content[{j}]", f"must be a content block object, not {_kind(block)}")
    if role == "assistant":
        return [_assistant(content, f"{where}.content")]
    return _user(content, f"{where}.content", calls, images)


def _assistant(blocks: list[dict], where: str) -> dict:
    texts, calls, thinking = [], [], []
    for j, b in enumerate(blocks):
        kind, at = b.get("type"), f"{where}[{j}]"
        if kind == "text":
            texts.append(_string(b, "text", at))  # as the model said it, blank or not
        elif kind == "tool_use":
            calls.append({"id": str(b.get("id") or f"toolu_{j}"), "type": "function",
                          "function": {"name": _string(b, "name", at), "arguments": _input(b, at)}})
        elif kind == "thinking":
            thinking.append(_string(b, "thinking", at))
        elif kind != "redacted_thinking":
            raise bad(f"{at}.type", f"unknown or unsupported block type {kind!r} in an assistant message")
    out: dict = {"role": "assistant", "content": "".join(texts)}
    if calls:
        out["tool_calls"] = calls
    if thinking:
        out["reasoning_content"] = "".join(thinking)
    return out


def _user(blocks: list[dict], where: str, calls: set[str], images=None) -> list[dict]:
    """calls: the ids of the tool_use blocks of the assistant turn before (consecutive user turns are
    one turn to Anthropic, so they share it)."""
    results, texts, images_at = [], [], set()
    for j, b in enumerate(blocks):
        kind, at = b.get("type"), f"{where}[{j}]"
        if kind == "text":
            texts.append(_text(b, at))
        elif kind == "tool_result":
            text = _result_text(b.get("content"), f"{at}.content", images)
            result = {"role": "tool", "tool_call_id": _answered(b, at, calls), "content": text}
            if b.get("is_error") is True:  # the client says the call failed (hearth.tool_guard.repeats reads it)
                result.update(is_error=True, content=text if tool_error(text) else ERROR_MARK + text)
            results.append(result)
        elif kind == "image":  # no newline beside it, as an OpenAI image part (HF's processors' layout)
            texts.append(read_part(b, at, images))
            images_at.add(len(texts) - 1)
        elif kind == "document":
            raise bad(f"{at}.type", f"{kind!r} blocks are not supported: this model reads text only")
        else:
            raise bad(f"{at}.type", f"unknown block type {kind!r}; expected 'text', 'image' or 'tool_result'")
    return results + ([{"role": "user", "content": _joined(texts, images_at)}] if texts or not results else [])


def _answered(block: dict, where: str, calls: set[str]) -> str:
    """The tool_use id a tool_result answers, refused in Anthropic's words when the assistant turn before
    made no such call (unlike OpenAI's routes, which follow vLLM's leniency: Anthropic clients meet
    this 400 from Anthropic itself, so hearth answering it too breaks none of them)."""
    use_id = _string(block, "tool_use_id", where)
    if use_id not in calls:
        raise bad(f"{where}.tool_use_id", f"unexpected `tool_use_id` found in `tool_result` blocks: {use_id}. Each "
                                          "`tool_result` block must have a corresponding `tool_use` block in the "
                                          "previous message.")
    return use_id


def _result_text(content: Any, where: str, images=None) -> str:
    if content is None:
        return ""
    if isinstance(content, (dict, int, float, bool)):
        return json.dumps(content)
    return text_content(content, where, images=images)


def _text(block: dict, where: str) -> str:
    """A text block's text; Anthropic refuses an empty or whitespace-only one, in these words."""
    text = _string(block, "text", where)
    if not text:
        raise bad(f"{where}.text", "text content blocks must be non-empty")
    if not text.strip():
        raise bad(f"{where}.text", "text content blocks must contain non-whitespace text")
    return text


def _combined(messages: list[dict]) -> list[dict]:
    """Consecutive user turns (text only) as one, their texts joined as one message's text blocks are."""
    out: list[dict] = []
    for m in messages:
        if out and m.keys() == {"role", "content"} and m["role"] == "user" and out[-1].keys() == m.keys() \
                and out[-1]["role"] == "user":
            out[-1] = {"role": "user", "content": out[-1]["content"] + "\n" + m["content"]}
        else:
            out.append(m)
    return out


def _input(block: dict, where: str):
    """A tool_use block's input, as templates read it. Anthropic's is an object; agents replay what they
    were given (a JSON string, [] or null for no arguments), so those pass as the object they mean (a
    string that is no JSON object stays raw, as in OpenAI's history); a number or a list of values was
    str()-ed into arguments no call had: a 400."""
    value = block.get("input")
    if value is None or value == []:
        return {}
    if not isinstance(value, (dict, str)):
        raise bad(f"{where}.input", f"must be an object, not {_kind(value)}")
    return template_arguments(value)


def _string(block: dict, key: str, where: str) -> str:
    value = block.get(key)
    if not isinstance(value, str):
        raise bad(f"{where}.{key}", "is required (a string)")
    return value
