"""Per-request sampling options (the vLLM / OpenAI vocabulary)."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hearth.errors import HearthError, wrong_number_field
from hearth.json_object import json_object


POOLINGS = ("last", "mean", "cls", "rank")
"""SamplingParams.pooling's values ("rank": a reranker's relevance logit, not an embedding)."""

GREEDY_EPS = 1e-5
"""vLLM's _SAMPLING_EPS: a smaller temperature samples greedily (logits / T would overflow to inf)."""


class InvalidSamplingParams(HearthError, ValueError):
    """A sampling option outside its valid range: `field` (the SamplingParams name, which the API maps
    to its wire's name) and `why`; the message is "{field} {why}". A ValueError too, as vLLM's
    (VLLMValidationError), so a library caller's `except ValueError` holds."""

    def __init__(self, field: str, why: str):
        super().__init__(field, why)  # both in args: the error pickles (a cluster replica's)
        self.field, self.why = field, why

    def __str__(self) -> str:
        return f"{self.field} {self.why}"


@dataclass(frozen=True, slots=True)
class StructuredOutput:
    """A constraint on the generated text, enforced by masking logits with a grammar engine.
    Exactly one field is set."""

    json_schema: dict | None = None
    """Output is one JSON value valid against this schema."""
    json_object: bool = False
    """Output is any JSON object."""
    grammar: str | None = None
    """A Lark grammar in llguidance's dialect (may embed `%json {schema}`), or a GBNF one (llama.cpp's,
    `root ::= ...`), which llguidance converts."""
    regex: str | None = None

    def __post_init__(self) -> None:
        given = [self.json_schema is not None, self.json_object, self.grammar is not None, self.regex is not None]
        if sum(given) != 1:
            raise InvalidSamplingParams("structured_output", "needs exactly one of json_schema, json_object, "
                                        f"grammar, regex; got {sum(given)}")


def _json(v: Any) -> StructuredOutput:
    return StructuredOutput(json_schema=json_object(v, "a JSON schema object"))  # vLLM takes JSON text too


def _text(make: Callable[[str], StructuredOutput]) -> Callable[[Any], StructuredOutput]:
    def build(v: Any) -> StructuredOutput:
        if not isinstance(v, str) or not v:
            raise ValueError(f"must be a non-empty string, not {v!r}")
        return make(v)
    return build


def _choice(v: Any) -> StructuredOutput:
    if not isinstance(v, list) or not v or not all(isinstance(c, str) for c in v):
        raise ValueError("must be a non-empty list of strings")
    return StructuredOutput(regex="|".join(f"({re.escape(c)})" for c in v))  # exactly one of the literals


def _json_object(v: Any) -> StructuredOutput | None:
    if not isinstance(v, bool):
        raise ValueError(f"must be a boolean, not {v!r}")
    return StructuredOutput(json_object=True) if v else None


CONSTRAINT_KINDS: dict[str, Callable[[Any], StructuredOutput | None]] = {
    "json": _json,
    "regex": _text(lambda v: StructuredOutput(regex=v)),
    "choice": _choice,
    "grammar": _text(lambda v: StructuredOutput(grammar=v)),
    "json_object": _json_object,
}
"""vLLM's constraint kinds (structured_outputs' keys, guided_<key>'s) -> the constraint from the value, or a
ValueError saying what is wrong with it: the server's fields (hearth.api.guided) and StructuredOutputsParams."""


@dataclass(slots=True)
class StructuredOutputsParams:
    """vLLM's constraint record (vllm.sampling_params.StructuredOutputsParams; GuidedDecodingParams before
    v0.12): one of json (a schema, dict or JSON text), regex, choice (the output is one of the strings), grammar
    (hearth: Lark or GBNF, StructuredOutput.grammar) or json_object. SamplingParams(structured_outputs=...)
    turns it into its StructuredOutput."""

    json: str | dict | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    disable_fallback: bool = False
    """Taken: hearth has one grammar engine, nothing to fall back from."""
    disable_any_whitespace: bool = False
    """Taken: hearth's JSON grammar writes no whitespace between tokens anyway."""
    disable_additional_properties: bool = False
    whitespace_pattern: str | None = None
    structural_tag: str | None = None
    backend: str | None = None
    """Older vLLM's engine choice: taken, hearth has one (llguidance)."""

    def constraint(self, name: str) -> StructuredOutput:
        """name: how the caller named this record (structured_outputs), for the error."""
        for unsupported in ("disable_additional_properties", "whitespace_pattern", "structural_tag"):
            if getattr(self, unsupported):
                raise InvalidSamplingParams(f"{name}.{unsupported}", "is not supported (hearth reads json, regex, "
                                            "choice, grammar, json_object)")
        kinds = [k for k in CONSTRAINT_KINDS if getattr(self, k)]
        if len(kinds) != 1:  # vLLM's rule: one kind of constraint
            raise InvalidSamplingParams(name, f"needs exactly one of {', '.join(CONSTRAINT_KINDS)}; "
                                        f"got {', '.join(kinds) or 'none'}")
        try:
            return CONSTRAINT_KINDS[kinds[0]](getattr(self, kinds[0]))
        except ValueError as e:
            raise InvalidSamplingParams(f"{name}.{kinds[0]}", str(e)) from None


GuidedDecodingParams = StructuredOutputsParams
"""vLLM's name for it before v0.12 (SamplingParams.guided_decoding)."""


_FLOATS = ("temperature", "top_p", "min_p", "typical_p", "repetition_penalty", "presence_penalty", "frequency_penalty",
           "dry_multiplier", "dry_base", "xtc_probability", "xtc_threshold", "top_n_sigma", "mirostat_tau",
           "mirostat_eta")

DRY_SEQUENCE_BREAKERS = ("\n", ":", "\"", "*")
"""llama.cpp's default DRY sequence breakers (common_params_sampling.dry_sequence_breakers)."""


@dataclass(slots=True)
class SamplingParams:
    n: int = 1
    """Completions to generate per prompt."""
    temperature: float = 1.0
    """0 means greedy."""
    top_p: float = 1.0
    top_k: int = 0
    """0 or -1 disables."""
    min_p: float = 0.0
    typical_p: float = 1.0
    """Locally typical sampling's mass (llama-server's typical_p, Ollama's option); 1 disables."""
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repeat_last_n: int | None = None
    """llama.cpp's penalty window: the repetition, presence and frequency penalties read the context's last N
    tokens (prompt then output), as llama.cpp's penalties sampler; 0: no penalty; -1: the whole context. None
    (the OpenAI/vLLM routes' default): vLLM's rule, repetition over the prompt and output, presence and
    frequency over the output only."""
    dry_multiplier: float = 0.0
    """DRY ("don't repeat yourself", hearth.sample.dry): a token that would extend a repeat of at least
    dry_allowed_length tokens loses multiplier * base ** (length - allowed_length) from its logit; 0: off."""
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = 64
    """How many of the context's last tokens DRY scans (llama.cpp's default 64); -1: the whole context; 0: off."""
    dry_sequence_breakers: list[str] = field(default_factory=lambda: list(DRY_SEQUENCE_BREAKERS))
    """Strings a repeat may not run across (llama.cpp's defaults: newline, colon, quote, asterisk)."""
    dry_breaker_ids: dict[int, list[list[int]]] | None = None
    """dry_sequence_breakers as token sequences, which the engine fills from its vocabulary (hearth.sample.
    dry_breakers): a head token -> the tails that complete a breaker after it ([]: the head holds one)."""
    xtc_probability: float = 0.0
    """XTC (exclude top choices, hearth.sample.xtc): with this probability a row drops every token at or above
    xtc_threshold but the least likely of them; 0: off."""
    xtc_threshold: float = 0.1
    """Above 0.5 XTC never acts (at most one token can reach it)."""
    top_n_sigma: float = -1.0
    """Keep the tokens whose logit is within n standard deviations of the largest (hearth.sample.top_n_sigma);
    0 or below: off."""
    mirostat: int = 0
    """Mirostat (hearth.sample.mirostat): 1 or 2, llama.cpp's versions; 0: off. It replaces top-k, top-p, min-p,
    typical-p, top-nσ and XTC, and its request drafts nothing under speculative decoding."""
    mirostat_tau: float = 5.0
    """Mirostat's target surprise (bits): lower is more focused."""
    mirostat_eta: float = 0.1
    """Mirostat's learning rate."""
    logit_bias: dict[int, float] | None = None
    bad_words: list[str] = field(default_factory=list)
    """vLLM's: words whose token sequences are never generated, at the start of the text or after a space
    (hearth.sample.bad_words). Only what is generated counts: a word the prompt ends in the middle of is not."""
    bad_words_token_ids: list[list[int]] = field(default_factory=list)
    """bad_words' token sequences, which the engine fills from its tokenizer (set: used as they are)."""
    seed: int | None = None
    max_tokens: int | None = 16
    """None: until the context is full."""
    min_tokens: int = 0
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    logprobs: int | None = None
    """Return this many top logprobs per generated token (0: only the sampled token's; -1: the whole vocabulary's,
    vLLM's, within EngineConfig.max_logprobs)."""
    prompt_logprobs: int | None = None
    """Return this many top logprobs per prompt token (0: only the prompt token's own), from the
    model's raw logits; the first token has none (RequestOutput.prompt_logprobs). Every prompt
    position is computed: the request takes no prefix-cache hit (vLLM's rule) until they are in."""
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    structured_output: StructuredOutput | None = None
    raw_logprobs: bool = False
    """Also report each sampled token's logprob before a grammar's mask (SampledToken.raw_logprob):
    `logprobs` are over what the grammar allows. Costs one log-softmax per row the grammar narrows;
    needs logprobs."""
    raw_logprobs_at: str | None = None
    """Where raw_logprobs are needed: a regex the text written so far must end with at that token
    (the tool guard's call name opening; raw_pattern); None: every token. Elsewhere a row the grammar
    narrows to a few tokens may score only those (hearth.runner.model_runner), and its raw_logprob is
    then None."""

    pooling: str | None = None
    """Only for embeddings: pool the prompt's final hidden states (POOLINGS) into the request's
    EngineOutput.embedding, L2-normalized. "mean" reads every prompt row, so the request takes no
    prefix-cache hit (as prompt_logprobs); "last" reads the row that samples."""
    pair_start: int | None = None
    """Only for pooling "rank": where the prompt's second text (a query-document pair's document) starts;
    from there its tokens take token type 1 (BERT's segment B, as transformers' tokenizer gives a pair).
    None: one text, type 0 throughout."""
    lora: dict[int, float] | None = None
    """LoRA adapter id -> scale for this request (llama-server's "lora": [{"id": 0, "scale": 0.5}]); the
    adapters it does not name run at 0. None: the engine's scales (--lora, POST /lora-adapters). The
    engine replaces it with every adapter's scale (hearth.engine.lora_adapters)."""

    best_of: int | None = None
    """vLLM's: None or n (hearth returns the n answers it samples; it draws no more to rank)."""
    detokenize: bool = True
    """vLLM's: False leaves each output's text "" (token ids only); stop strings then cannot match (refused)."""
    spaces_between_special_tokens: bool = True
    """vLLM's; taken either way: hearth writes each token's own text (llama.cpp's rule), adding no spaces."""
    allowed_token_ids: list[int] | None = None
    """vLLM's: only these tokens may be sampled (the others' logits -inf, before bias and penalties)."""
    truncate_prompt_tokens: int | None = None
    """vLLM's: the prompt's last k tokens only (-1: as many as max_model_len); None: the whole prompt."""
    structured_outputs: StructuredOutputsParams | None = None
    """vLLM's constraint; it sets structured_output."""
    guided_decoding: StructuredOutputsParams | None = None
    """structured_outputs' name before vLLM v0.12 (GuidedDecodingParams)."""
    extra_args: dict | None = None
    """vLLM's free-form arguments for custom samplers: kept, read by nothing in hearth."""

    def __post_init__(self) -> None:
        for name in ("structured_outputs", "guided_decoding"):
            if (given := getattr(self, name)) is not None:
                so = given.constraint(name)
                if self.structured_output is not None and self.structured_output != so:  # (replace() brings both)
                    raise InvalidSamplingParams(name, "cannot be combined with another constraint (one per request)")
                self.structured_output = so
        for name in ("stop", "stop_token_ids", "bad_words"):  # vLLM's types are Optional: None is none
            if getattr(self, name) is None:
                setattr(self, name, [])
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if isinstance(self.bad_words, tuple):
            self.bad_words = list(self.bad_words)
        if isinstance(self.dry_sequence_breakers, tuple):
            self.dry_sequence_breakers = list(self.dry_sequence_breakers)
        if (wrong := wrong_number_field(self)) is not None:  # a string or None in a number field, named
            raise InvalidSamplingParams(*wrong)
        for f in _FLOATS:  # an int given (Ollama's options, a library call) is the float the sampler's tensors hold:
            self._as_float(f)  # torch.tensor([1.0, 10**20]) overflowed int64 in the engine step, a 500 for all in it
        checks = [
            # a string would read as a list of its characters, each one banned
            (isinstance(self.bad_words, list) and all(isinstance(w, str) and w.strip() for w in self.bad_words),
             "bad_words", f"must be a list of words (non-empty strings), got {self.bad_words!r}"),
            # NaN and inf named as such (a NaN fails every range check), on every route alike
            *((math.isfinite(getattr(self, f)), f, f"must be a finite number, got {getattr(self, f)}") for f in _FLOATS),
            (self.n >= 1, "n", f"must be at least 1, got {self.n}"),
            (self.temperature >= 0, "temperature", f"must be >= 0, got {self.temperature}"),
            # 0: the most likely token alone (llama.cpp's top-p keeps min_keep, 1; OpenAI documents 0..1)
            (0 <= self.top_p <= 1, "top_p", f"must be in [0, 1], got {self.top_p}"),
            (self.top_k >= -1, "top_k", f"must be -1, 0 or positive, got {self.top_k}"),
            (0 <= self.min_p <= 1, "min_p", f"must be in [0, 1], got {self.min_p}"),
            (0 <= self.typical_p <= 1, "typical_p", f"must be in [0, 1], got {self.typical_p}"),
            (self.repetition_penalty > 0, "repetition_penalty", f"must be > 0, got {self.repetition_penalty}"),
            (-2 <= self.presence_penalty <= 2, "presence_penalty",
             f"must be in [-2, 2], got {self.presence_penalty}"),
            (-2 <= self.frequency_penalty <= 2, "frequency_penalty",
             f"must be in [-2, 2], got {self.frequency_penalty}"),
            (self.repeat_last_n is None or self.repeat_last_n >= -1, "repeat_last_n",
             f"must be -1 (the whole context), 0 (off) or a number of tokens, got {self.repeat_last_n}"),
            (self.dry_multiplier >= 0, "dry_multiplier", f"must be >= 0, got {self.dry_multiplier}"),
            (self.dry_base >= 1, "dry_base", f"must be >= 1, got {self.dry_base}"),
            (self.dry_allowed_length >= 0, "dry_allowed_length", f"must be >= 0, got {self.dry_allowed_length}"),
            (self.dry_penalty_last_n >= -1, "dry_penalty_last_n",
             f"must be -1 (the whole context), 0 (off) or a number of tokens, got {self.dry_penalty_last_n}"),
            (isinstance(self.dry_sequence_breakers, list) and all(isinstance(b, str) and b for b in self.dry_sequence_breakers),
             "dry_sequence_breakers", f"must be a list of non-empty strings, got {self.dry_sequence_breakers!r}"),
            (0 <= self.xtc_probability <= 1, "xtc_probability", f"must be in [0, 1], got {self.xtc_probability}"),
            (0 <= self.xtc_threshold <= 1, "xtc_threshold", f"must be in [0, 1], got {self.xtc_threshold}"),
            (self.mirostat in (0, 1, 2), "mirostat", f"must be 0 (off), 1 or 2, got {self.mirostat}"),
            (self.mirostat_eta >= 0, "mirostat_eta", f"must be >= 0, got {self.mirostat_eta}"),
            (self.max_tokens is None or self.max_tokens >= 1, "max_tokens",
             f"must be at least 1, got {self.max_tokens}"),
            (self.min_tokens >= 0, "min_tokens", f"must be >= 0, got {self.min_tokens}"),
            (self.max_tokens is None or self.min_tokens <= self.max_tokens,
             "min_tokens", f"must be at most max_tokens ({self.max_tokens}), got {self.min_tokens}"),
            # torch.Generator.manual_seed's range: a larger seed failed the whole engine step
            (self.seed is None or -(1 << 63) <= self.seed <= (1 << 64) - self.n,  # choice j draws with seed + j
             "seed", f"must be in [-2**63, 2**64 - n] (n = {self.n}), got {self.seed}"),
            (all(self.stop), "stop", "must not hold an empty string (it would match before any text)"),
            (self.detokenize or not self.stop, "stop", "needs detokenize (a stop string matches text)"),
            (self.best_of is None or self.best_of == self.n, "best_of",
             f"is not supported (use n: hearth returns every answer it samples), got {self.best_of} with n {self.n}"),
            (self.allowed_token_ids is None or len(self.allowed_token_ids) > 0, "allowed_token_ids",
             "must not be empty (no token could be sampled)"),
            (self.truncate_prompt_tokens is None or self.truncate_prompt_tokens == -1 or self.truncate_prompt_tokens >= 1,
             "truncate_prompt_tokens", f"must be -1 or at least 1, got {self.truncate_prompt_tokens}"),
            # -1: vLLM's whole vocabulary, which the engine's max_logprobs (-1 there too) lets through or refuses
            (self.logprobs is None or self.logprobs >= -1, "logprobs", f"must be >= 0 (or -1), got {self.logprobs}"),
            (self.prompt_logprobs is None or self.prompt_logprobs >= -1,
             "prompt_logprobs", f"must be >= 0 (or -1), got {self.prompt_logprobs}"),
            (not self.raw_logprobs or self.logprobs is not None, "raw_logprobs", "needs logprobs (0 or more)"),
            (self.pooling is None or self.pooling in POOLINGS, "pooling",
             f"must be one of {', '.join(POOLINGS)}, got {self.pooling!r}"),
            (self.pair_start is None or self.pooling == "rank" and self.pair_start >= 1, "pair_start",
             f"needs pooling 'rank' and a position >= 1, got {self.pair_start} with pooling {self.pooling!r}"),
            (self.pooling is None or self.max_tokens == 1, "pooling",
             f"needs max_tokens 1 (an embedding reads the prompt alone), got {self.max_tokens}"),
            (self.raw_logprobs_at is None or _compiles(self.raw_logprobs_at),
             "raw_logprobs_at", f"is not a regular expression: {self.raw_logprobs_at!r}"),
        ]
        for ok, field, why in checks:  # field: named on its own, so the API needs no parsing
            if not ok:
                raise InvalidSamplingParams(field, why)

    def _as_float(self, name: str) -> None:
        v = getattr(self, name)
        if isinstance(v, int) and not isinstance(v, bool):
            try:
                setattr(self, name, float(v))
            except OverflowError:  # past a double (10**400): named by the finite check as inf
                setattr(self, name, math.inf if v > 0 else -math.inf)

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_EPS or self.top_k == 1

    @property
    def penalized(self) -> bool:
        """A repetition, presence or frequency penalty applies (repeat_last_n 0 turns them off)."""
        on = self.repetition_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0
        return on and self.repeat_last_n != 0

    @property
    def dry(self) -> bool:
        """DRY applies (llama.cpp's llama_sampler_init_dry: multiplier non-zero, a window)."""
        return self.dry_multiplier != 0.0 and self.dry_penalty_last_n != 0

    @property
    def xtc(self) -> bool:
        """XTC can act (llama.cpp's llama_sampler_init_xtc: above 0.5 one token at most reaches the threshold)."""
        return self.xtc_probability > 0.0 and self.xtc_threshold <= 0.5


def over_max_logprobs(k: int, max_logprobs: int, setting: str = "max_logprobs") -> str | None:
    """Why a top-k logprobs count is refused under vLLM's max_logprobs (EngineConfig.max_logprobs;
    -1: no cap), or None: the one rule for logprobs and prompt_logprobs, library and server alike.
    k -1 is vLLM's whole vocabulary (the API's; SamplingParams takes none below 0). setting: how the
    caller names the cap."""
    if max_logprobs < 0 or 0 <= k <= max_logprobs:
        return None
    whole = " (-1 asks for the whole vocabulary)" if k == -1 else ""
    return f"must be at most {max_logprobs} ({setting}), got {k}{whole}"


@functools.cache
def raw_pattern(regex: str) -> re.Pattern[bytes]:
    """raw_logprobs_at as the runner matches it: at the end of the text's bytes."""
    return re.compile(rb"(?:" + regex.encode() + rb")\Z")


def _compiles(regex: str) -> bool:
    try:
        raw_pattern(regex)
    except re.error:
        return False
    return True
