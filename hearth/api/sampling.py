"""Request fields of either API -> SamplingParams, with the server's limits. A value out of range is
a 400 that names the field (InvalidSamplingParams.field, by the wire's name)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hearth.api.errors import APIError, from_hearth_error
from hearth.api.llama_names import LLAMA_SAMPLERS, breakers
from hearth.engine.lora_adapters import check_lora
from hearth.errors import MaxTokensTooLargeError, check_room
from hearth.sampling_params import InvalidSamplingParams, SamplingParams, StructuredOutput, over_max_logprobs

# OpenAI/Anthropic field -> SamplingParams field, copied when the request sets it
_COMMON = ("temperature", "top_p", "top_k", "min_p", "typical_p", "presence_penalty", "frequency_penalty",
           "repetition_penalty", "seed", *LLAMA_SAMPLERS)


def check_logprobs(param: str, k: int | None, served) -> int | None:
    """The one rule for a request's top-k logprobs count, named by the wire's `param` (a 400): 0 up to
    the served engine's max_logprobs (`hearth serve --max-logprobs`; the engine checks it too), or
    vLLM's -1, the whole vocabulary, where that cap is -1 (returned as the vocabulary's size)."""
    if k is None:
        return None
    if k < -1:
        raise _bad(param, f"must be >= 0, got {k}")
    if why := over_max_logprobs(k, served.max_logprobs, "the server's --max-logprobs"):
        raise _bad(param, why)
    return served.vocab_size if k == -1 and served.vocab_size else k


@dataclass(slots=True)
class Limits:
    max_n: int = 16
    max_tokens: int = 0
    """Largest max_tokens a request may ask for, and one's that asks none; 0 = the model's context length."""
    defaults: dict[str, float] = field(default_factory=dict)
    """SamplingParams field -> the server's value for a request that does not give it (hearth serve --temp,
    --override-generation-config: llama-server's and vLLM's server-side defaults); a request's own wins."""


def make_params(fields: dict, limits: Limits, max_model_len: int, field_names: dict | None = None,
                prompt_tokens: int = 0) -> SamplingParams:
    """`fields` holds SamplingParams names (None = not given); `field_names` maps them back to the
    wire's names for error messages (max_tokens -> max_completion_tokens, stop -> stop_sequences);
    prompt_tokens: the (longest) prompt's, which an explicit max_tokens must leave room for."""
    names = field_names or {}
    kwargs = {**limits.defaults, **{k: v for k, v in fields.items() if v is not None}}
    _check_asked(kwargs, limits, max_model_len, names)
    try:
        check_room(prompt_tokens, kwargs.get("max_tokens"), max_model_len, names.get("max_tokens", "max_tokens"))
    except MaxTokensTooLargeError as e:
        raise from_hearth_error(e) from None
    return _built(kwargs, limits, names)


def check_before_load(pool, model: str | None, limits: Limits, fields: dict, field_names: dict | None = None) -> None:
    """make_params' checks that need no loaded model, run before the route's model loads, so a bad request never
    loads one (nor unloads another for it): n, an asked max_tokens against the server's cap and the model's
    context (which the pool knows from its file's header: ModelPool.context), and SamplingParams' own checks of
    the `fields` a route reads without its model (the sampler fields, n, max_tokens, min_tokens, stop). The
    prompt's room for max_tokens needs the prompt's tokens, and logit_bias, stop_token_ids, logprobs and
    structured output the engine's vocabulary, tokenizer or settings: make_params and the route check those
    after the load. A `lora` field's ids are checked against the model's adapters (ModelPool.known) too."""
    names = field_names or {}
    known = pool.known(model)
    kwargs = {**limits.defaults, **{k: v for k, v in fields.items() if v is not None}}
    _check_asked(kwargs, limits, known.max_model_len, names)
    _built(kwargs, limits, names)
    check_lora_before_load(known, kwargs.get("lora"), names.get("lora", "lora"))


def check_lora_before_load(known, asked: dict[int, float] | None, param: str = "lora") -> None:
    """asked (adapter id -> scale) against the adapters of a model not yet loaded (hearth.api.model_spec.Known;
    lora_count None: not known, the engine checks it after the load)."""
    if known.lora_count is None:
        return
    try:
        check_lora(asked, known.lora_count, param)
    except InvalidSamplingParams as e:
        raise _bad(e.field, e.why) from None


def _built(kwargs: dict, limits: Limits, names: dict) -> SamplingParams:
    if kwargs.get("max_tokens") is None:  # not asked: the server's limit, else until the context is full
        kwargs = {**kwargs, "max_tokens": limits.max_tokens or None}  # (the engine ends either where its room does)
    try:
        return SamplingParams(**kwargs)
    except InvalidSamplingParams as e:
        raise _bad(names.get(e.field, e.field), e.why) from None


def _check_asked(kwargs: dict, limits: Limits, max_model_len: int, names: dict) -> None:
    """n and max_tokens (kwargs: SamplingParams names, the server's defaults in) against the server's limits
    and the context (0: not known, not checked)."""
    n = kwargs.get("n", 1)
    if n > limits.max_n:
        raise _bad(names.get("n", "n"), f"must be at most {limits.max_n} on this server, got {n}")
    max_tokens = kwargs.get("max_tokens")
    if max_tokens is not None and max_model_len and (why := _over_cap(max_tokens, limits.max_tokens, max_model_len)):
        raise _bad(names.get("max_tokens", "max_tokens"), why)


def _over_cap(max_tokens: int, limit: int, max_model_len: int) -> str | None:
    """Why an asked max_tokens is past the server's --max-tokens-limit or the context, naming which bounds it."""
    if limit and limit <= max_model_len and max_tokens > limit:
        return f"must be at most {limit} (the server's --max-tokens-limit), got {max_tokens}"
    if max_tokens > max_model_len:
        return f"must be at most {max_model_len} (the model's context holds {max_model_len} tokens), got {max_tokens}"
    return None


def common_fields(body, served=None) -> dict:
    fields = {k: getattr(body, k, None) for k in _COMMON}
    return {**fields, "dry_sequence_breakers": breakers(fields["dry_sequence_breakers"]),
            "lora": lora_scales(body, served)}


def lora_scales(body, served, model: str | None = None) -> dict[int, float] | None:
    """A request's LoRA scales: its `lora` list (llama-server's [{"id", "scale"}]; a repeated id: the
    last), else the adapter its `model` (or `model`: the name as the route reads it) names (vLLM's
    --lora-modules) at 1, else None (the server's)."""
    entries = getattr(body, "lora", None)
    if entries is not None:
        return {e.id: e.scale for e in entries}
    j = getattr(served, "lora_names", {}).get(model or getattr(body, "model", None))
    return None if j is None else {j: 1.0}


def logit_bias(bias: dict | list | None, served) -> dict[int, float] | None:
    """OpenAI's {"token id": bias} or llama-server's [[token id or text, bias or false], ...] (its object form
    takes a text as a key too) -> {token id: bias}; a text biases each of its tokens, false bans the token
    (-inf), as llama-server's."""
    if not bias:
        return None
    if isinstance(bias, dict):
        pairs = list(bias.items())
    elif all(isinstance(p, list) and len(p) == 2 for p in bias):
        pairs = [tuple(p) for p in bias]
    else:
        raise _bad("logit_bias", "must be an object {token id: bias} or a list of [token id or text, bias] pairs")
    out = {}
    for key, value in pairs:
        if value is False:
            value = float("-inf")
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not -100 <= value <= 100:
            raise _bad("logit_bias", f"bias of {key!r} must be a number in [-100, 100] or false, got {value!r}")
        for token in _bias_tokens(key, served):
            out[token] = float(value)
    return out


def _bias_tokens(key, served) -> list[int]:
    """A logit_bias key's tokens: a token id (an int, or a string of digits), else the text's tokens."""
    if isinstance(key, bool) or not isinstance(key, (int, str)):
        raise _bad("logit_bias", f"keys are token ids or texts, got {key!r}")
    if isinstance(key, str) and not key.strip().lstrip("-").isdigit():
        tokens = served.tokenizer.encode(key, add_special_tokens=False)
        if not tokens:
            raise _bad("logit_bias", f"{key!r} has no tokens")
        return tokens
    token = int(key)
    if token < 0 or token >= served.vocab_size:
        raise _bad("logit_bias", f"token id {token} is outside the vocabulary")
    return [token]


def token_ids(param: str, ids: list[int] | None, vocab_size: int | None) -> list[int]:
    """A request's list of token ids (stop_token_ids), each in the vocabulary (as logit_bias's keys):
    an id past it was never sampled, so the stop it asked for silently never came."""
    why = outside_vocabulary(ids or [], vocab_size)
    if why:
        raise _bad(param, why)
    return list(ids or [])


def outside_vocabulary(ids: list[int], vocab_size: int | None) -> str | None:
    """Why a list of token ids is refused (its first id outside the vocabulary), or None: the one
    wording for stop_token_ids, a prompt of ids and /detokenize's tokens."""
    bad = next((t for t in ids if t < 0 or vocab_size is not None and t >= vocab_size), None)
    if bad is None:
        return None
    return f"token id {bad} is outside the vocabulary" + (f" (0..{vocab_size - 1})" if vocab_size else "")


def prompt_token_ids(ids: list[int], vocab_size: int | None, where: str = "prompt") -> list[int]:
    """A prompt given as token ids (/v1/completions', llama-server's /completion), checked where the
    error can name it (where: prompt, or prompt[i] of a batch; input[i] for embeddings): not empty,
    every id in the vocabulary."""
    param = where.split("[")[0]
    if not ids:
        raise APIError(400, f"{where}: must not be empty", param=param)
    if why := outside_vocabulary(ids, vocab_size):
        raise APIError(400, f"{where}: {why}", param=param)
    return list(ids)


def asked_prompt_logprobs(body, served) -> int | None:
    """vLLM's `prompt_logprobs` field -> SamplingParams.prompt_logprobs (a stream's are refused with
    the body: hearth.api.openai_protocol; a k past a tiny vocabulary by the engine's check_request).
    None where a stream asks 0: nothing to send."""
    k = check_logprobs("prompt_logprobs", body.prompt_logprobs, served)
    return None if body.stream else k


def stop_list(stop) -> list[str]:
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else list(stop)


def response_format(fmt) -> StructuredOutput | None:
    """OpenAI `response_format` -> a constraint (None for text)."""
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return StructuredOutput(json_object=True)
    if fmt.json_schema is None:
        raise _bad("response_format.json_schema", "is required when type is 'json_schema'")
    if fmt.json_schema.schema_ is None:
        raise _bad("response_format.json_schema.schema", "is required (a JSON schema object)")
    return StructuredOutput(json_schema=fmt.json_schema.schema_)


def _bad(param: str, why: str) -> APIError:
    return APIError(400, f"{param}: {why}", param=param)
