"""The sampling fields a request body takes beyond its API's own, declared once for OpenAI's bodies (chat,
completions, Responses) and Anthropic's Messages: vLLM's (top_k, min_p ...), and llama.cpp's samplers by
llama-server's names (hearth.api.llama_names.LLAMA_SAMPLERS: repeat_last_n, DRY, XTC, top_n_sigma, mirostat) with
its repeat_penalty. hearth.api.sampling.common_fields reads them the same way on every route. llama-server's own
/v1/messages keeps only temperature, top_p and top_k of a body (server_chat_convert_anthropic_to_oai): hearth takes
the rest there too, as extension fields, rather than ignoring what a client asked for."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, StrictFloat, StrictInt, model_validator

from hearth.api.errors import APIError
from hearth.api.llama_names import LLAMA_READS, LLAMA_WIRE_NAMES, LlamaInt

_OPENAI_SPELLINGS = {"max_tokens": ("max_completion_tokens", "max_tokens", "max_output_tokens"),
                     "repetition_penalty": ("repetition_penalty",)}
"""The OpenAI/vLLM fields that say what a llama-server name does (chat's max_completion_tokens before max_tokens;
Responses' max_output_tokens); the llama-server value goes into the last one a body declares."""


class SamplerExtensions(BaseModel):
    """A mixin of request bodies (hearth.api.openai_protocol's rules: unknown fields ignored and named, null
    is not given, strict scalars). Integers by llama-server's names (top_k, its samplers') take an integral
    float as llama-server does (hearth.api.llama_names.LlamaInt); seed stays OpenAI's strict integer."""

    model_config = ConfigDict(extra="ignore")

    top_k: LlamaInt | None = None
    min_p: StrictFloat | None = None
    typical_p: StrictFloat | None = None
    """Locally typical sampling (llama-server's and vLLM's older versions' field); 1 = off."""
    presence_penalty: StrictFloat | None = None
    frequency_penalty: StrictFloat | None = None
    repetition_penalty: StrictFloat | None = None
    repeat_penalty: StrictFloat | None = None
    """llama-server's repetition_penalty, as its /v1 routes take it."""
    seed: StrictInt | None = None
    repeat_last_n: LlamaInt | None = None
    """The repetition / presence / frequency penalties over the context's last N tokens (llama.cpp's rule);
    not given: vLLM's (hearth.sampling_params.SamplingParams.repeat_last_n)."""
    dry_multiplier: StrictFloat | None = None
    dry_base: StrictFloat | None = None
    dry_allowed_length: LlamaInt | None = None
    dry_penalty_last_n: LlamaInt | None = None
    dry_sequence_breakers: list[str] | str | None = None
    """A list of strings, or text-generation-webui's JSON-encoded list (hearth.api.llama_names.breakers)."""
    xtc_probability: StrictFloat | None = None
    xtc_threshold: StrictFloat | None = None
    top_n_sigma: StrictFloat | None = None
    mirostat: LlamaInt | None = None
    """1 or 2 (llama.cpp's versions), 0 off: replaces the filters, and its request drafts nothing."""
    mirostat_tau: StrictFloat | None = None
    mirostat_eta: StrictFloat | None = None

    @model_validator(mode="after")
    def _llama_spellings(self):
        """llama-server's names -> OpenAI's fields, each pair the body declares (n_predict is chat's,
        completions' and Responses', not Anthropic's, whose max_tokens is required): a client written for llama-server sends
        n_predict, and it ran ~2,000 tokens ignored. Both spellings given and different is a 400 naming
        llama-server's, not one of them silently."""
        declared = type(self).model_fields
        for field, wire in LLAMA_WIRE_NAMES.items():
            theirs = getattr(self, wire) if wire in declared else None
            if theirs is None:
                continue
            value = LLAMA_READS.get(field, lambda v: v)(theirs)
            # a null is not given (llama-server's json_value reads it so): only a value can disagree
            given = [f for f in _OPENAI_SPELLINGS[field]
                     if f in declared and f in self.model_fields_set and getattr(self, f) is not None]
            ours = getattr(self, given[0]) if given else None
            if given and ours != value:
                raise APIError(400, f"{wire}: {theirs} disagrees with {given[0]} ({ours}): send one of them",
                               param=wire)
            target = [f for f in _OPENAI_SPELLINGS[field] if f in declared][-1]
            setattr(self, target, value)  # and into model_fields_set: asked, not a default (completions' 16)
        return self

    def llama_names(self) -> dict[str, str]:
        """SamplingParams fields this body gave by llama-server's names -> those names, for its errors."""
        return {field: wire for field, wire in LLAMA_WIRE_NAMES.items() if getattr(self, wire, None) is not None}
