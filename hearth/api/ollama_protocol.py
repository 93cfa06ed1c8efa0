"""Ollama's native request bodies (docs/api.md and api/types.go of github.com/ollama/ollama): /api/chat,
/api/generate, /api/show. The same rules as the OpenAI bodies (unknown fields ignored and named, null
means not given, strict scalars), with Ollama's one difference: `stream` is true unless set false.
`options`, `format`, `think` and the messages stay plain values here, checked by hand where the error
can name the field (`options.temperature`, `messages[1].images`): hearth.api.ollama_options and
hearth.api.ollama_messages."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from pydantic import Field, StrictBool, StrictFloat, StrictInt

from hearth.api.openai_protocol import _Request


class _Generating(_Request):
    """What /api/chat and /api/generate share."""
    model: str | None = None
    """A served model's id or alias, Ollama's `:latest` tag allowed (none: the first model)."""
    format: str | dict[str, Any] | None = None
    """"json" or a JSON schema object: hearth's structured output."""
    options: dict[str, Any] | None = None
    """Ollama's Modelfile parameters (hearth.api.ollama_options.OPTIONS)."""
    stream: StrictBool = True
    think: StrictBool | str | None = None
    """true / false, or a level ("low", "medium", "high", "max"): the template's enable_thinking."""
    keep_alive: str | StrictInt | StrictFloat | None = None
    """Accepted; hearth keeps a model loaded until the pool needs its room (hearth.api.model_pool)."""
    truncate: StrictBool | None = None
    """Accepted: hearth never truncates a prompt silently (a prompt past the context is a 400)."""
    shift: StrictBool | None = None
    logprobs: StrictBool = False
    top_logprobs: StrictInt | None = None


class ChatRequest(_Generating):
    messages: list[dict[str, Any]] = Field(default_factory=list)
    """Empty: load the model and answer done (Ollama's way to preload one)."""
    tools: list[dict[str, Any]] | None = None
    hearth: Any = None
    """hearth's extensions, as on the OpenAI and Anthropic routes (hearth.api.extensions.KEYS)."""


class GenerateRequest(_Generating):
    prompt: str = ""
    """Empty (and no suffix): load the model and answer done."""
    suffix: str | None = None
    """Text after the answer: a fill-in-the-middle prompt (hearth.api.infill)."""
    system: str | None = None
    template: str | None = None
    raw: StrictBool = False
    """The prompt as it is, no chat template."""
    context: list[StrictInt] | None = None
    """Deprecated in Ollama: the `context` a previous answer returned, put before this prompt."""
    images: list[Any] | None = None


class EmbedRequest(_Request):
    """/api/embed's body, and the older /api/embeddings' (`prompt`: one text)."""
    model: str | None = None
    input: str | list[str] | None = None
    prompt: str | None = None
    truncate: StrictBool | None = None
    """true: an input past the context is cut to what fits; otherwise (Ollama's default is true) a 400:
    hearth never truncates unasked."""
    dimensions: StrictInt | None = None
    options: dict[str, Any] | None = None
    keep_alive: str | StrictInt | StrictFloat | None = None


class ShowRequest(_Request):
    model: str | None = None
    name: str | None = None
    """Ollama's older name for `model`."""
    verbose: StrictBool = False


def rfc3339(t: datetime) -> str:
    """Ollama's timestamps (created_at, modified_at): RFC 3339, in UTC."""
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now() -> str:
    return rfc3339(datetime.now(timezone.utc))
