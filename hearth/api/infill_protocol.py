"""The body of POST /infill, llama-server's fields (tools/server/README.md, `/infill` and the
`/completion` options it shares), with llama-server's defaults where hearth's API routes differ
(temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, n_predict -1: no limit), so an editor plugin
written against llama-server gets the sampling it expects. Fields llama-server has and hearth does
not (samplers, n_probs, response_fields, t_max_prompt_ms ...) are ignored and named in
`x-hearth-ignored-fields`, as on every route (hearth.api.ignored_fields)."""

from __future__ import annotations

from pydantic import StrictBool, StrictFloat, StrictInt, StrictStr, field_validator

from hearth.api.openai_protocol import _Body, _Request


class ExtraChunk(_Body):
    """One input_extra entry: another file's text, given as repo-level context."""
    text: StrictStr
    filename: StrictStr = "tmp"


class InfillRequest(_Request):
    model: str | None = None
    input_prefix: StrictStr
    input_suffix: StrictStr
    input_extra: list[ExtraChunk] = []
    prompt: StrictStr = ""
    """Text after the prefix (llama-server puts it there, before FIM_SUF): what the user typed so far."""
    n_predict: StrictInt | None = None
    """Any negative (llama-server's -1, its default, and -2): until an end token or the context is full;
    0: evaluate the prompt into the cache and answer nothing (editors warm the cache so)."""
    max_tokens: StrictInt | None = None
    """llama-server's alias of n_predict, read where n_predict is absent."""
    temperature: StrictFloat = 0.8
    top_k: StrictInt = 40
    top_p: StrictFloat = 0.95
    min_p: StrictFloat = 0.05
    repeat_penalty: StrictFloat = 1.0
    presence_penalty: StrictFloat = 0.0
    frequency_penalty: StrictFloat = 0.0
    seed: StrictInt = -1
    """-1: a random seed (llama-server's default)."""
    stop: list[StrictStr] = []
    ignore_eos: StrictBool = False
    stream: StrictBool = False
    n_indent: StrictInt = 0
    """Lines after the answer's first must be indented at least this much (hearth.api.infill_stops)."""
    t_max_predict_ms: StrictInt = 0
    """Past this many ms of generation the next new line ends the answer (hearth.api.infill_stops)."""
    return_tokens: StrictBool = False
    """The generated token ids in `tokens` (else `tokens` is empty, as llama-server's)."""
    cache_prompt: StrictBool = True
    """Accepted, and always true here: hearth's prefix cache gives the same tokens either way."""

    @field_validator("n_predict", "max_tokens")
    @classmethod
    def _limit(cls, v: int | None) -> int | None:
        """Any negative is no limit, as llama.cpp reads it (-1 "infinity" and -2 "until the context is
        full" both end at the context here)."""
        return None if v is not None and v < 0 else v

    def limit(self) -> int | None:
        """The answer's token limit (None: none; 0: the prompt only), n_predict before its alias max_tokens."""
        given = self.model_fields_set
        return self.n_predict if "n_predict" in given else self.max_tokens
