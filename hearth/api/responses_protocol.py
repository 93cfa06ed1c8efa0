"""The OpenAI Responses request body (`POST /v1/responses`). Items in `input` stay plain dicts:
hearth.api.responses_items checks them by hand so a bad one is named precisely (`input[2].type`)."""

from __future__ import annotations

from typing import Any

from pydantic import StrictBool, StrictFloat, StrictInt

from hearth.api.openai_protocol import _Request


class ResponsesRequest(_Request):
    model: str | None = None
    input: str | list[Any] | None = None
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: StrictBool = True
    hearth: Any = None
    """hearth's extensions: the keys of hearth.api.extensions.KEYS (tool guard, workflow, compaction, max_tools, router)."""
    text: dict[str, Any] | None = None
    """{"format": {"type": "text" | "json_object" | "json_schema", "name", "schema", "strict"}}."""
    reasoning: dict[str, Any] | None = None
    max_output_tokens: StrictInt | None = None
    temperature: StrictFloat | None = None
    top_p: StrictFloat | None = None
    top_k: StrictInt | None = None
    min_p: StrictFloat | None = None
    presence_penalty: StrictFloat | None = None
    frequency_penalty: StrictFloat | None = None
    repetition_penalty: StrictFloat | None = None
    seed: StrictInt | None = None
    store: StrictBool = True
    previous_response_id: str | None = None
    stream: StrictBool = False
    metadata: dict[str, Any] | None = None
    user: str | None = None
