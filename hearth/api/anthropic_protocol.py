"""Anthropic Messages request bodies. Unknown fields are ignored; messages stay plain dicts for
hearth.api.messages to check by hand (so errors name `messages[1].content[0].type`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from hearth.api.openai_protocol import _Body  # the same rules: unknown fields ignored, null means not given


class ThinkingConfig(_Body):
    type: str = "disabled"
    budget_tokens: int | None = None


class OutputFormat(_Body):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(_Body):
    format: OutputFormat | None = None


class MessagesRequest(_Body):
    model: str | None = None
    messages: list[dict[str, Any]]
    max_tokens: int
    system: str | list[dict[str, Any]] | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: ThinkingConfig | None = None
    output_config: OutputConfig | None = None
    """`format` {type: json_schema, schema}: Anthropic's structured output."""
    metadata: dict[str, Any] | None = None
    # not in Anthropic's API; accepted like vLLM's extra fields
    seed: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    hearth: Any = None
    """hearth's extensions: the keys of hearth.api.extensions.KEYS (tool guard, workflow, compaction, max_tools, router)."""


class CountTokensRequest(_Body):
    model: str | None = None
    messages: list[dict[str, Any]]
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: ThinkingConfig | None = None
