"""Request options hearth echoes back or hands to the chat template, typed as OpenAI and Anthropic type
them: a bad one is a 400 naming it (`metadata.k: Input should be a valid string`), as theirs are,
where it was echoed back as sent (`"reasoning": {"effort": 5}`) or ignored.

- metadata (OpenAI's chat and Responses): at most 16 pairs, keys of at most 64 characters, string
  values of at most 512 (OpenAI's limits). Anthropic's (`user_id` only) is hearth.api.anthropic_protocol's.
- reasoning effort (chat's `reasoning_effort`, Responses' `reasoning.effort`): one of OpenAI's levels,
  handed to the template as `reasoning_effort` (gpt-oss's variable; vLLM passes it the same way).
- a schema's name (chat's `response_format.json_schema.name`, Responses' `text.format.name`): a-z, A-Z, 0-9,
  underscores and dashes, at most 64 characters (OpenAI's rule; it names the schema, which OpenAI shows the model).
Responses' `reasoning` and `text` objects are hearth.api.responses_protocol's."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictStr

MAX_METADATA_PAIRS, MAX_METADATA_KEY, MAX_METADATA_VALUE = 16, 64, 512
"""OpenAI's metadata limits (its API reference: 16 pairs, keys up to 64 characters, values up to 512)."""

Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]
"""OpenAI's reasoning effort levels (its API reference, Responses' and chat's alike)."""


Metadata = Annotated[dict[Annotated[str, Field(max_length=MAX_METADATA_KEY)],
                          Annotated[StrictStr, Field(max_length=MAX_METADATA_VALUE)]],
                     Field(max_length=MAX_METADATA_PAIRS)]
"""Each bad key or value named (`metadata.k: String should have at most 512 characters`)."""


SchemaName = Annotated[StrictStr, Field(max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")]
"""A bad one named with the rule it breaks (`text.format.name: String should match pattern '^[a-zA-Z0-9_-]+$'`)."""


def effort_kwargs(effort: str | None, kwargs: dict | None = None) -> dict | None:
    """Template variables with the effort as `reasoning_effort`; the request's own chat_template_kwargs
    (kwargs) win, as the more specific ask."""
    if effort is None:
        return kwargs
    return {"reasoning_effort": effort, **(kwargs or {})}
