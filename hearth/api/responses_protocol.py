"""The OpenAI Responses request body (`POST /v1/responses`). Items in `input` stay plain dicts:
hearth.api.responses_items checks them by hand so a bad one is named precisely (`input[2].type`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, StrictBool, StrictInt, StrictStr

from hearth.api.llama_names import LlamaInt
from hearth.api.openai_protocol import SamplingScalars, _Body
from hearth.api.typed_options import Effort, Metadata, SchemaName


class Reasoning(_Body):
    """`reasoning`: echoed back; its effort goes to the template as `reasoning_effort` (hearth.api.typed_options)."""
    effort: Effort | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None
    """summary's deprecated name, still in OpenAI's reference."""


class TextFormat(_Body):
    """One of {"type": "text"}, {"type": "json_object"}, {"type": "json_schema", "name", "schema", "strict"?,
    "description"?}: the types here; what json_schema requires, hearth.api.responses_items.text_format (so
    the 400 names the missing field)."""
    type: Literal["text", "json_object", "json_schema"]
    name: SchemaName | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: StrictBool | None = None
    description: StrictStr | None = None


class TextConfig(_Body):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None
    """Taken, as OpenAI's reference has it, and echoed; no template here reads it."""


class ResponsesRequest(SamplingScalars):
    input: str | list[Any] | None = None
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: StrictBool = True
    hearth: Any = None
    """hearth's extensions: the keys of hearth.api.extensions.KEYS (tool guard, workflow, compaction, max_tools, router)."""
    text: TextConfig | None = None
    reasoning: Reasoning | None = None
    max_output_tokens: StrictInt | None = None
    n_predict: LlamaInt | None = None
    """llama-server's max_tokens, as on chat and completions (hearth.api.sampler_fields): -1 (any negative) no limit."""
    store: StrictBool = True
    background: StrictBool = False
    """Answer at once with status "queued" and generate in the background (hearth.api.responses_background)."""
    previous_response_id: str | None = None
    conversation: Any = None
    """OpenAI's Conversations (/v1/conversations), which hearth does not keep: a 400, as dropping it would lose the
    history the client counts on."""
    metadata: Metadata | None = None
    truncation: Literal["auto", "disabled"] = "disabled"
    """auto: the oldest turns dropped to fit the context; disabled: a 400 (hearth.api.responses_options)."""
    include: list[str] | None = None
    """"message.output_text.logprobs": output_text parts carry logprobs (hearth.api.responses_options)."""
    top_logprobs: StrictInt | None = None
    """Most likely tokens per position with include's logprobs (OpenAI: 0 to 20; the server's --max-logprobs)."""
