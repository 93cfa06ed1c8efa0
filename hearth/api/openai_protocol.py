"""OpenAI request bodies (chat completions, completions) plus vLLM's extra sampling fields.

Unknown fields are ignored (clients send vendor extensions freely), never silently: the response names
them (hearth.api.ignored_fields). Scalars are strict: a boolean is no integer (`"max_tokens": true` was
1) and a string no boolean or number (`"stream": "yes"` streamed), as OpenAI and Anthropic answer
them; an integer is still a float. Messages stay plain dicts here:
hearth.api.messages checks them by hand so a bad one is named precisely (`messages[2].content`)."""

from __future__ import annotations

import math
from functools import cache
from typing import Any, Literal, get_args

from pydantic import (BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, ValidationInfo, field_validator,
                      model_validator)

from hearth.api.ignored_fields import note
from hearth.api.llama_names import LlamaInt
from hearth.api.sampler_fields import SamplerExtensions
from hearth.api.typed_options import Effort, Metadata, SchemaName


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data: Any) -> Any:
        """OpenAI's schema lets clients send null for any optional field (`"n": null`, `"stream": null`):
        where the field's type has no null, it means the default, not a type error. Where it has one,
        null stays a value of its own (completions' `"max_tokens": null`: until the context is full)."""
        if not isinstance(data, dict):
            return data
        not_nullable = {name for f_name, f in cls.model_fields.items() if type(None) not in get_args(f.annotation)
                        for name in (f_name, f.alias) if name}
        # an unknown null stays: it is ignored either way, and named (hearth.api.ignored_fields)
        return {k: v for k, v in data.items() if v is not None or k not in not_nullable}


FLOAT_SAMPLING = ("temperature", "top_p", "min_p", "typical_p", "presence_penalty", "frequency_penalty",
                  "repetition_penalty", "repeat_penalty", "dry_multiplier", "dry_base", "xtc_probability",
                  "xtc_threshold", "top_n_sigma", "mirostat_tau", "mirostat_eta")
"""Every request's float sampling fields (OpenAI's, Anthropic's, llama-server's names)."""


class _Request(_Body):
    """A whole request body: the top-level names no field knows are noted for the response's
    `x-hearth-ignored-fields` header and the server log (hearth.api.ignored_fields)."""

    @model_validator(mode="before")
    @classmethod
    def _note_unknown(cls, data: Any) -> Any:
        if isinstance(data, dict):
            note(data, _known(cls))
        return data

    @field_validator(*FLOAT_SAMPLING, mode="before", check_fields=False)
    @classmethod
    def _finite(cls, v: Any) -> Any:
        """Python's json reads NaN and Infinity: named as such (as SamplingParams names them), before a range
        check would say "less than or equal to 2" of a NaN."""
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"must be a finite number, got {v}")
        return v


@cache
def _known(cls: type[BaseModel]) -> frozenset[str]:
    return frozenset(name for f_name, f in cls.model_fields.items() for name in (f_name, f.alias) if name)


class StreamOptions(_Body):
    include_usage: StrictBool = False
    continuous_usage_stats: StrictBool = False
    """vLLM's: with include_usage, every chunk carries the usage so far (not only the last one)."""


def stream_usage(options: StreamOptions | None) -> tuple[bool, bool]:
    """(a usage chunk at the end, usage on every chunk), as vLLM reads stream_options: continuous
    usage only where include_usage is set too."""
    usage = bool(options and options.include_usage)
    return usage, usage and options.continuous_usage_stats


class JSONSchemaFormat(_Body):
    name: SchemaName = "response"
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: StrictBool | None = None


class ResponseFormat(_Body):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None


class LoraEntry(_Body):
    """One adapter's scale for this request (llama-server's `lora` entries; GET /lora-adapters lists the ids)."""
    id: StrictInt
    scale: StrictFloat


class SamplingScalars(_Request, SamplerExtensions):
    """The sampling knobs every OpenAI request body has (chat, completions, Responses); the fields beyond
    OpenAI's (vLLM's, llama.cpp's samplers) are hearth.api.sampler_fields', which Anthropic's body shares."""

    model: str | None = None
    temperature: StrictFloat | None = Field(None, le=2)
    """OpenAI's range is 0 to 2 (a 400 above; below 0 is SamplingParams' error). llama-server's routes
    (hearth.api.llama_protocol) keep its unbounded temperature."""
    top_p: StrictFloat | None = None
    stream: StrictBool = False
    user: str | None = None
    lora: list[LoraEntry] | None = None
    """llama-server's per-request LoRA scales; the adapters not listed run at 0 (hearth.api.sampling.lora_scales)."""


class SamplingFields(SamplingScalars):
    """What both OpenAI endpoints share; the names are OpenAI's and vLLM's."""

    n: StrictInt = 1
    logit_bias: dict[str, Any] | list[Any] | None = None
    """OpenAI's {"token id": bias}, or llama-server's [[token id or text, bias or false]] (hearth.api.sampling)."""
    stop: str | list[str] | None = None
    stop_token_ids: list[StrictInt] | None = None
    bad_words: list[str] | None = None
    """vLLM's: words never generated (SamplingParams.bad_words; each model's engine finds their tokens)."""
    min_tokens: StrictInt = 0
    ignore_eos: StrictBool = False
    skip_special_tokens: StrictBool = True
    include_stop_str_in_output: StrictBool = False
    stream_options: StreamOptions | None = None
    response_format: ResponseFormat | None = None
    # vLLM's structured-output fields (hearth.api.guided): the value's shape is checked there, per kind
    guided_json: Any = None
    guided_regex: Any = None
    guided_choice: Any = None
    guided_grammar: Any = None
    structured_outputs: dict[str, Any] | None = None
    json_schema: Any = None
    """llama-server's structured-output fields, on its OpenAI routes too (hearth.api.guided)."""
    grammar: Any = None
    prompt_logprobs: StrictInt | None = None
    """vLLM's: each prompt token's logprob and rank, and its top N alternatives (hearth.api.logprobs)."""
    n_predict: LlamaInt | None = None
    """llama-server's max_tokens, as its /v1 routes take it (hearth.api.llama_names): -1 (any negative) no limit."""

    @field_validator("stream_options")
    @classmethod
    def _only_streamed(cls, v: StreamOptions | None, info: ValidationInfo) -> StreamOptions | None:
        """OpenAI and vLLM answer it 400 on a whole (non-streamed) reply: it was accepted and did nothing."""
        if v is not None and not info.data.get("stream"):
            raise ValueError("is only allowed when stream is true")
        return v

    @field_validator("prompt_logprobs")
    @classmethod
    def _prompt_logprobs(cls, v: int | None, info: ValidationInfo) -> int | None:
        """vLLM's rule, checked first as vLLM does: a stream has no place for them (0 asks for none
        there, and passes). Their range is hearth.api.sampling.check_logprobs's."""
        if v is not None and info.data.get("stream") and v != 0:
            raise ValueError("is not available when stream is true")
        return v


class ChatCompletionRequest(SamplingFields):
    messages: list[dict[str, Any]]
    max_tokens: StrictInt | None = None
    max_completion_tokens: StrictInt | None = None
    logprobs: StrictBool = False
    top_logprobs: StrictInt | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    functions: list[dict[str, Any]] | None = None
    """Legacy (pre-tools) function calling: answered with `function_call`, one call."""
    function_call: str | dict[str, Any] | None = None
    parallel_tool_calls: StrictBool = True
    add_generation_prompt: StrictBool = True
    continue_final_message: StrictBool = False
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_effort: Effort | None = None
    """OpenAI's; the template's `reasoning_effort` unless chat_template_kwargs sets one (hearth.api.typed_options)."""
    metadata: Metadata | None = None
    """OpenAI's tags for a stored completion: typed as OpenAI's, and kept nowhere (hearth stores no chats)."""
    hearth: Any = None

    @model_validator(mode="after")
    def _one_ending(self):
        """Both asked for (add_generation_prompt given true, not its default): vLLM's 400, not one silently."""
        if self.continue_final_message and self.add_generation_prompt and "add_generation_prompt" in self.model_fields_set:
            raise ValueError("continue_final_message: cannot be true with add_generation_prompt true (the last "
                             "message is continued, no new one opened): set add_generation_prompt false")
        return self
    """hearth's extensions: the keys of hearth.api.extensions.KEYS (tool guard, workflow, compaction, max_tools, router)."""


class CompletionRequest(SamplingFields):
    prompt: str | list[str] | list[StrictInt] | list[list[StrictInt]]

    @field_validator("prompt", mode="before")
    @classmethod
    def _one_of_the_prompt_shapes(cls, v):
        return prompt_shapes(v)

    max_tokens: StrictInt | None = 16
    logprobs: StrictInt | None = None
    echo: StrictBool = False
    suffix: str | None = None
    best_of: StrictInt | None = None


class EmbeddingRequest(_Request):
    model: str | None = None
    input: str | list[str] | list[StrictInt] | list[list[StrictInt]]

    @field_validator("input", mode="before")
    @classmethod
    def _one_of_the_prompt_shapes(cls, v):
        return prompt_shapes(v)

    encoding_format: Literal["float", "base64"] = "float"
    dimensions: StrictInt | None = None
    user: str | None = None
    truncate_prompt_tokens: StrictInt | None = None
    """vLLM's: an input past k tokens keeps its last k (-1: as many as the context holds); None: a 400 instead."""


def prompt_shapes(v):
    """A prompt in one of OpenAI's four shapes, or one line naming them (pydantic's union error listed
    "a valid list" three times)."""
    if isinstance(v, list) and v and isinstance(v[0], list):
        ok = all(isinstance(p, list) and all(_token_id(t) for t in p) for p in v)
    else:
        ok = isinstance(v, str) or isinstance(v, list) and (all(isinstance(p, str) for p in v)
                                                            or all(_token_id(t) for t in v))
    if not ok:
        raise ValueError("must be a string, a list of strings, a list of token ids or a list of lists of token ids")
    return v


class TokenizeRequest(_Request):
    """vLLM's body (prompt or messages), or llama-server's: `content`, `add_special` (default false)."""
    model: str | None = None
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    add_special_tokens: StrictBool = True
    add_generation_prompt: StrictBool = True
    tools: list[dict[str, Any]] | None = None
    content: str | None = None
    """llama-server's text field (special tokens parsed, as there)."""
    add_special: StrictBool = False
    """llama-server's BOS switch for `content`, off by default as there."""
    with_pieces: StrictBool = False
    """llama-server's: each token as {"id", "piece"} (its text, or its bytes where they are not UTF-8)."""


class ApplyTemplateRequest(_Request):
    """llama-server's /apply-template body (and the chat's continue_final_message, previewed as it runs)."""
    model: str | None = None
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    add_generation_prompt: StrictBool = True
    continue_final_message: StrictBool = False


class DetokenizeRequest(_Request):
    model: str | None = None
    tokens: list[StrictInt]


def _token_id(t) -> bool:
    return isinstance(t, int) and not isinstance(t, bool)
