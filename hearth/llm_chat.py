"""LLM.chat (vLLM's llm.chat) and its prompt: the messages read as the server reads them, rendered by the model's
chat template, and their ids (with images, each image's rows: llm_vision.ChatImages). A bad message is a
ValueError, the server's 400 as the library raises it."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, replace

from hearth import llm_vision
from hearth.api.chat_template import RESERVED_VARS, ChatTemplate
from hearth.llm_prompts import chat_ids, one_each
from hearth.outputs import RequestOutput
from hearth.sampling_params import SamplingParams
from hearth.tool_guard import DEFAULT_MODE
from hearth.tool_guard.offline import chat_constraint, chat_message


@dataclass(frozen=True, slots=True)
class ChatOptions:
    """How a chat renders (vLLM's LLM.chat keywords)."""

    add_generation_prompt: bool = True
    continue_final_message: bool = False
    """The last (assistant) message is continued, not closed: the prompt ends right after its text."""
    chat_template: str | None = None
    """A Jinja template in place of the LLM's."""
    chat_template_kwargs: dict | None = None
    """Template variables over the LLM's (enable_thinking, ...)."""

    def __post_init__(self) -> None:
        if self.add_generation_prompt and self.continue_final_message:  # vLLM's apply_hf_chat_template's rule
            raise ValueError("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")


class ChatCalls:
    """LLM's chat() and encode_chat() (a mixin: it reads LLM's chat_template, runs LLM.generate)."""

    def chat(self, messages: list[dict] | list[list[dict]],
             sampling_params: SamplingParams | list[SamplingParams] | None = None,
             tools: list[dict] | None = None, *, tool_choice: str | dict | None = None,
             tool_guard: str = DEFAULT_MODE, use_tqdm: bool | Callable = True, lora_request=None,
             chat_template: str | None = None, add_generation_prompt: bool = True,
             continue_final_message: bool = False, chat_template_kwargs: dict | None = None,
             chat_template_content_format: str = "auto") -> list[RequestOutput]:
        """One RequestOutput per conversation, as vLLM's llm.chat: `messages` one conversation (a list of
        messages) or a list of them, run together; sampling_params one for all or one per conversation.
        tool_guard: "guard" or "grammar" constrain a call once the model starts one (from the first
        token when tool_choice forces one), "off" leaves the output free; the server's guard also
        validates and retries (hearth.api.guarded). Each output's `message` is its answer as an
        assistant message: content, parsed `tool_calls`, reasoning. chat_template, add_generation_prompt,
        continue_final_message, chat_template_kwargs: vLLM's (hearth.llm_chat.ChatOptions); use_tqdm and
        lora_request: as generate's. chat_template_content_format: vLLM's, taken; hearth finds which content form
        the template reads (ChatTemplate.typed_content)."""
        options = ChatOptions(add_generation_prompt, continue_final_message, chat_template, chat_template_kwargs)
        source = chat_template if chat_template is not None else self.chat_template.source
        chats = conversations(messages)
        rendered = [chat_prompt(self, m, tools, options) for m in chats]
        params = one_each(sampling_params, len(chats), "sampling params", "conversations")
        params = [p or SamplingParams() for p in params]
        for i, ((text, _), p) in enumerate(zip(rendered, params)):
            so = chat_constraint(source, tools, tool_choice, tool_guard, text)
            if so is not None and p.structured_output is None:
                params[i] = replace(p, structured_output=so)
        # each RequestOutput's prompt is its rendered chat, as vLLM's
        outs = self.generate([{**llm_vision.tokens_prompt(ids), "prompt": text} for text, ids in rendered], params,
                             use_tqdm=use_tqdm, lora_request=lora_request)
        for out, (text, _) in zip(outs, rendered):
            for o in out.outputs:  # each answer also as the message to append for the next turn
                o.message = chat_message(source, tools, tool_choice, text, o.text, cut=o.finish_reason == "length")
        return outs

    def encode_chat(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        """The chat's prompt ids; with images, a hearth.api.media_prompt.PromptIds whose `media` are their
        rows' spans (llm_vision.tokens_prompt makes either a prompt for generate and stream)."""
        return chat_prompt(self, messages, tools)[1]


def chat_prompt(llm, messages: list[dict], tools: list[dict] | None,
                options: ChatOptions = ChatOptions()) -> tuple[str, list[int]]:
    """(the rendered text, its ids) of llm's chat template (or options') over messages and tools."""
    images = llm_vision.ChatImages(llm)
    messages = template_messages(messages, images.images)
    template = llm.chat_template if options.chat_template is None else template_of(llm, options.chat_template)
    kwargs = {k: v for k, v in (options.chat_template_kwargs or {}).items() if k not in RESERVED_VARS}
    text = template.render(messages, tools=template_tools(tools), add_generation_prompt=options.add_generation_prompt,
                           **kwargs)
    if options.continue_final_message:
        text = continued(text, messages)
    with as_value_error():
        return text, images.encode(text, messages) if images.images else chat_ids(llm.tokenizer, text)


def template_of(llm, source: str | None) -> ChatTemplate:
    """A chat template (its Jinja source; None or "": the architecture's fallback) over llm's tokens,
    architecture and chat_template_kwargs: the LLM's own, and a chat's chat_template=."""
    return ChatTemplate(source, llm.tokenizer.bos_token, llm.tokenizer.eos_token, llm.gguf.arch,
                        llm.config.chat_template_kwargs)


def conversations(messages) -> list[list[dict]]:
    """LLM.chat's messages as a list of conversations: one conversation (a list of messages), or a list of them
    (vLLM's batch: its first item a list)."""
    if not isinstance(messages, (list, tuple)) or not messages or not isinstance(messages[0], (list, tuple)):
        return [messages]
    return [list(m) for m in messages]


def continued(text: str, messages: list[dict]) -> str:
    """The rendered chat cut right after its last message's text (vLLM's continue_final_message, as the
    server's hearth.api.served.render_chat)."""
    final = messages[-1].get("content") or "" if messages else ""
    if not isinstance(final, str):
        final = "".join(p.get("text", "") for p in final if isinstance(p, dict))
    at = text.rfind(final) if final else -1
    return text[:at + len(final)] if at >= 0 else text


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
