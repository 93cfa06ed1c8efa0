"""llama-server's own request bodies (tools/server/README.md): the `/completion` options, which `/infill`
shares, with llama-server's defaults where hearth's API routes differ (temperature 0.8, top_k 40, top_p
0.95, min_p 0.05, n_predict -1: no limit), so a client written against llama-server (Tabby, Continue,
llama.vscode, llama.vim) gets the sampling it expects, its samplers vLLM lacks too (repeat_last_n 64, DRY,
XTC, top_n_sigma, mirostat: hearth.api.llama_names.LLAMA_SAMPLERS) and which of them run (`samplers`,
hearth.api.llama_chain). Fields llama-server has and hearth does not (n_probs, response_fields,
t_max_prompt_ms, dynatemp_range ...) are ignored and named in `x-hearth-ignored-fields`, as on every route
(hearth.api.ignored_fields). Every integer option takes an integral float, as llama-server's params parser
reads one (hearth.api.llama_names.LlamaInt)."""

from __future__ import annotations

from typing import Any

from pydantic import StrictBool, StrictFloat, StrictInt, StrictStr, field_validator

from hearth.api.llama_chain import sampler_names
from hearth.api.llama_names import LlamaInt, predict_limit
from hearth.api.openai_protocol import LoraEntry, _Request
from hearth.sampling_params import DRY_SEQUENCE_BREAKERS


class LlamaOptions(_Request):
    model: str | None = None
    n_predict: LlamaInt | None = None
    """-1 (llama-server's default): until an end token or the context is full, and so any negative here
    (hearth's choice: llama-server stops a -2 or -7 after one token); 0: evaluate the prompt into the
    cache and answer nothing (editors warm the cache so). null: not given."""
    max_tokens: LlamaInt | None = None
    """llama-server's alias of n_predict, read where n_predict is absent."""
    temperature: StrictFloat = 0.8
    top_k: LlamaInt = 40
    top_p: StrictFloat = 0.95
    min_p: StrictFloat = 0.05
    typical_p: StrictFloat = 1.0
    """Locally typical sampling; 1: off (llama-server's default)."""
    repeat_penalty: StrictFloat = 1.0
    presence_penalty: StrictFloat = 0.0
    frequency_penalty: StrictFloat = 0.0
    repeat_last_n: LlamaInt = 64
    """The penalties' window, the context's last N tokens (llama-server's default 64; 0: off, -1: all)."""
    dry_multiplier: StrictFloat = 0.0
    dry_base: StrictFloat = 1.75
    dry_allowed_length: LlamaInt = 2
    dry_penalty_last_n: LlamaInt = 64
    dry_sequence_breakers: list[str] | str = list(DRY_SEQUENCE_BREAKERS)
    """A list of strings, or text-generation-webui's JSON-encoded list (hearth.api.llama_names.breakers)."""
    xtc_probability: StrictFloat = 0.0
    xtc_threshold: StrictFloat = 0.1
    top_n_sigma: StrictFloat = -1.0
    mirostat: LlamaInt = 0
    mirostat_tau: StrictFloat = 5.0
    mirostat_eta: StrictFloat = 0.1
    logit_bias: dict[str, Any] | list[Any] | None = None
    """[[token id or text, bias or false], ...] or {"id or text": bias} (hearth.api.sampling.logit_bias)."""
    seed: LlamaInt = -1
    """-1: a random seed (llama-server's default)."""
    stop: list[StrictStr] | StrictStr = []
    """Stop strings; one given as a string is one stop (llama-server takes both)."""
    ignore_eos: StrictBool = False
    stream: StrictBool = False
    n_indent: LlamaInt = 0
    """Lines after the answer's first must be indented at least this much (hearth.api.infill_stops)."""
    t_max_predict_ms: LlamaInt = 0
    """Past this many ms of generation the next new line ends the answer (hearth.api.infill_stops)."""
    return_tokens: StrictBool = False
    """The generated token ids in `tokens` (else `tokens` is empty, as llama-server's)."""
    json_schema: Any = None
    """The answer follows this JSON schema ({}: any JSON value), as llama-server's (hearth.api.guided)."""
    grammar: Any = None
    """The answer follows this GBNF grammar (or Lark in llguidance's dialect); "" is none."""
    lora: list[LoraEntry] | None = None
    """Per-request LoRA scales, the adapters not listed at 0 (as llama-server's)."""
    samplers: list[StrictStr] | None = None
    """Which samplers run, by name or one character each (hearth.api.llama_chain); not given: all of them."""
    cache_prompt: StrictBool = True
    """Accepted, and always true here: hearth's prefix cache gives the same tokens either way."""

    @field_validator("samplers", mode="before")
    @classmethod
    def _sampler_names(cls, v):
        return sampler_names(v)

    @field_validator("stop")
    @classmethod
    def _one_stop(cls, v: list[str] | str) -> list[str]:
        return [s for s in ([v] if isinstance(v, str) else v) if s]  # llama-server skips empty stop words

    def n_predict_read(self) -> int:
        """n_predict as llama-server reads it, before its alias max_tokens (a null one is not given, as its
        json_value reads it), else -1: what the reply's generation_settings echo, a -7 as -7."""
        given = self.n_predict if self.n_predict is not None else self.max_tokens
        return -1 if given is None else given

    def limit(self) -> int | None:
        """The answer's token limit (None: none, any negative n_predict; 0: the prompt only)."""
        return predict_limit(self.n_predict_read())


class LlamaCompletionRequest(LlamaOptions):
    """POST /completion (and /completions): a raw prompt, no template."""
    prompt: StrictStr | list[StrictInt | StrictStr]
    """Text (BOS added where the model adds one, special tokens parsed, as llama-server), token ids, or
    llama-server's mix of both (`[12, " text", 34]`); a list of texts alone is several prompts, which
    llama-server answers one by one and hearth refuses (hearth.api.completion_routes)."""
    multimodal_data: Any = None
    """llama-server's images for `<__media__>` markers in a raw prompt: refused (images go in by a chat template)."""

    @field_validator("prompt", mode="before")
    @classmethod
    def _no_prompt_object(cls, v):
        if isinstance(v, dict) and {"prompt_string", "multimodal_data"} & set(v):  # llama-server's multimodal prompt
            raise ValueError("llama-server's {prompt_string, multimodal_data} prompt: /completion takes a raw text "
                             "prompt only here; send images as image_url parts to /v1/chat/completions")
        return v
