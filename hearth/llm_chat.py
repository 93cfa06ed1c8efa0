"""LLM.chat's prompt: the messages read as the server reads them, rendered by the model's chat template, and
their ids (with images, each image's rows: llm_vision.ChatImages). A bad message is a ValueError, the server's
400 as the library raises it."""

from __future__ import annotations

from contextlib import contextmanager

from hearth import llm_vision
from hearth.llm_prompts import chat_ids


def chat_prompt(llm, messages: list[dict], tools: list[dict] | None) -> tuple[str, list[int]]:
    """(the rendered text, its ids) of llm's chat template over messages and tools."""
    images = llm_vision.ChatImages(llm)
    messages = template_messages(messages, images.images)
    text = llm.chat_template.render(messages, tools=template_tools(tools))
    with as_value_error():
        return text, images.encode(text, messages) if images.images else chat_ids(llm.tokenizer, text)


def template_messages(messages: list[dict], images=None) -> list[dict]:
    """Chat messages read as the server reads them (hearth.api.messages: the same roles, checks and
    mapping, developer -> system) less OpenAI's wire-only rules: Hugging Face's convention holds (a tool
    message needs no tool_call_id; keys hearth does not read reach the template). A bad message is a
    ValueError naming the field, as the server's 400. images: hearth.api.media_parts.RequestImages, which
    takes the image parts (their markers in the text); None: an image part is refused."""
    from hearth.api.messages import openai_messages

    with as_value_error():
        return openai_messages(messages, wire=False, images=images)


def template_tools(tools: list[dict] | None) -> list[dict] | None:
    """Tools checked as the server checks them (hearth.api.tools.openai_tools: a function with a name, its
    parameters a schema), in OpenAI's shape; a malformed one is a ValueError naming it (`tools[0]...`), not a
    tool the template renders without a name."""
    from hearth.api.tools import openai_tools

    if tools is None:
        return None
    with as_value_error():
        return openai_tools(tools)


@contextmanager
def as_value_error():
    """The server's 400 (an APIError naming the field) as the library's ValueError."""
    from hearth.api.errors import APIError  # here: it imports fastapi, which the library need not load

    try:
        yield
    except APIError as e:
        raise ValueError(e.message) from None
