"""Anthropic Messages request bodies. Unknown fields are ignored; messages stay plain dicts for
hearth.api.messages to check by hand (so errors name `messages[1].content[0].type`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr

# the same rules as OpenAI bodies: unknown fields ignored (and named), null means not given, strict scalars
from hearth.api.openai_protocol import _Body, _Request
from hearth.api.sampler_fields import SamplerExtensions


class ThinkingConfig(_Body):
    """Anthropic's extended thinking, checked as Anthropic checks it: a budget of at least 1024 tokens,
    and less than max_tokens (the route checks that). hearth spends no budget: the type turns the
    template's `enable_thinking` on or off."""

    type: Literal["enabled", "disabled", "adaptive"] = "disabled"
    budget_tokens: StrictInt | None = Field(None, ge=1024)


class OutputFormat(_Body):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class Metadata(_Body):
    """Anthropic's metadata: only `user_id`, kept nowhere here; another key is Anthropic's 400 too."""
    model_config = ConfigDict(extra="forbid")
    user_id: StrictStr | None = Field(None, max_length=256)
    """Anthropic's limit: 256 characters."""


class OutputConfig(_Body):
    format: OutputFormat | None = None


class MessagesRequest(_Request, SamplerExtensions):
    """Anthropic's fields, and (not in Anthropic's API) the OpenAI routes' sampling extensions: top_k is
    Anthropic's own too; seed, min_p, the penalties, llama.cpp's samplers by llama-server's names
    (hearth.api.sampler_fields)."""

    model: str | None = None
    messages: list[dict[str, Any]]
    max_tokens: StrictInt
    system: str | list[dict[str, Any]] | None = None
    stop_sequences: list[str] | None = None
    stream: StrictBool = False
    temperature: StrictFloat | None = Field(None, ge=0, le=1)
    """Anthropic's range is [0, 1] (OpenAI's [0, 2])."""
    top_p: StrictFloat | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: ThinkingConfig | None = None
    output_config: OutputConfig | None = None
    """`format` {type: json_schema, schema}: Anthropic's structured output."""
    output_format: OutputFormat | None = None
    """The same format in its beta's spelling (structured-outputs-2025-11-13), which the SDK's
    `beta.messages.create(output_format=...)` still sends."""
    metadata: Metadata | None = None
    hearth: Any = None
    """hearth's extensions: the keys of hearth.api.extensions.KEYS (tool guard, workflow, compaction, max_tools, router)."""


class CountTokensRequest(_Request):
    model: str | None = None
    messages: list[dict[str, Any]]
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: ThinkingConfig | None = None
