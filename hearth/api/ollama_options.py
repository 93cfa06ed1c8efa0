"""Ollama's request knobs -> hearth's: `options` (Modelfile parameters) -> SamplingParams fields,
`format` -> a structured-output constraint, `think` -> the chat template's variables, `keep_alive` -> how long
the model stays loaded once idle (0: unload it now).

Options hearth applies are hearth.api.errors.OLLAMA_OPTIONS; `repeat_last_n` is Ollama's 64 where not given
(the window its repeat_penalty, presence_penalty and frequency_penalty read, as llama.cpp's; hearth applies no
penalty Ollama's request does not give, as before: Ollama's own repeat_penalty default, 1.1 in its
api.DefaultOptions beside RepeatLastN 64 (the snapshot read; newer engines may differ), is not applied, as none
of its defaults is (temperature 0.8, top_k 40 ...)); mirostat, mirostat_tau and mirostat_eta (its older
Options) apply too; `num_ctx` sizes nothing here (hearth's
context is set when the model loads): one past it is ignored and named, as a prompt too long for the
served context is a 400 of its own (clients send a large num_ctx with every request); any other key,
Ollama's (num_gpu, tfs_z, ...) or unknown, is ignored as Ollama ignores an unknown one, and named in
`x-hearth-ignored-fields` as `options.KEY`. Types are checked as Ollama's Options.FromMap checks them
(an integer option takes a number, a float option a number, `stop` a list of strings)."""

from __future__ import annotations

from typing import Any

from hearth.api import durations
from hearth.api.errors import OLLAMA_OPTIONS, APIError
from hearth.api.ignored_fields import note
from hearth.api.messages import _kind
from hearth.api.sampling import check_logprobs
from hearth.sampling_params import StructuredOutput

_INTEGERS = frozenset({"top_k", "seed", "num_predict", "num_ctx", "repeat_last_n", "mirostat"})
REPEAT_LAST_N = 64
"""Ollama's default repeat_last_n (api.DefaultOptions; 0: off, -1: num_ctx, here the whole context)."""
THINK_LEVELS = ("low", "medium", "high", "max")


def _bad(param: str, why: str) -> APIError:
    return APIError(400, f"{param}: {why}", param=param)


def _number(name: str, value: Any) -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        kind = "an integer" if name in _INTEGERS else "a number"
        raise _bad(f"options.{name}", f"must be {kind}, not {_kind(value)}")
    return int(value) if name in _INTEGERS else value  # Go truncates a JSON number into an int option


def _stop(value: Any) -> list[str]:
    if isinstance(value, str):  # Ollama wants a list; one string means itself
        return [value]
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise _bad("options.stop", f"must be a list of strings, not {_kind(value)}")
    return list(value)


def sampling_fields(options: dict | None, max_model_len: int, defaults: dict | None = None) -> dict:
    """SamplingParams fields (None = not given) from `options`; a num_ctx past the served context is noted.
    defaults: the server's (hearth serve --repeat-last-n ...), which win over Ollama's own repeat_last_n."""
    options = options or {}
    fields: dict[str, Any] = dict.fromkeys(OLLAMA_OPTIONS.values())
    for name, value in options.items():
        if value is None:
            continue
        if name == "num_ctx":
            if _number(name, value) > max_model_len:
                note({"options.num_ctx": None}, frozenset())
        elif name == "stop":
            fields["stop"] = _stop(value)
        elif name in OLLAMA_OPTIONS:
            fields[OLLAMA_OPTIONS[name]] = _number(name, value)
    note({f"options.{k}": None for k in options if k not in OLLAMA_OPTIONS and k != "num_ctx"}, frozenset())
    if fields["max_tokens"] is not None and fields["max_tokens"] <= 0:  # -1 and 0: no limit, -2: fill the context
        fields["max_tokens"] = None
    if fields["seed"] is not None and fields["seed"] < 0:  # Ollama's -1: a random seed
        fields["seed"] = None
    fields["stop"] = fields["stop"] or []
    if fields["repeat_last_n"] is None:
        fields["repeat_last_n"] = (defaults or {}).get("repeat_last_n", REPEAT_LAST_N)
    return fields


def within_context(fields: dict, prompt_tokens: int, max_model_len: int) -> dict:
    """A num_predict past the room the prompt leaves means until the context is full, as Ollama reads it
    (Continue sends its default 4096 whatever the context): the answer then ends with done_reason
    "length", never a 400 for a limit the context sets anyway."""
    asked = fields["max_tokens"]
    if asked is not None and prompt_tokens + asked > max_model_len:
        return {**fields, "max_tokens": None}
    return fields


def structured_output(fmt: str | dict | None) -> StructuredOutput | None:
    """`format`: "json" (any JSON object) or a JSON schema object; "" or none: free text."""
    if fmt is None or fmt == "":
        return None
    if fmt == "json":
        return StructuredOutput(json_object=True)
    if isinstance(fmt, dict):
        return StructuredOutput(json_schema=fmt) if fmt else StructuredOutput(json_object=True)
    raise _bad("format", f"must be \"json\" or a JSON schema object, got {fmt!r}")


def think_kwargs(think: bool | str | None, thinks: bool) -> dict:
    """Template variables for `think`: enable_thinking (Qwen3's and others' switch), and a level as
    reasoning_effort (gpt-oss's; "max" is its "high", as Ollama maps it). thinks: the model can (a request
    that asks one that cannot is Ollama's 400); false is taken by every model."""
    if think is None:
        return {}
    if not isinstance(think, bool) and think not in THINK_LEVELS:
        raise _bad("think", f"must be true, false or one of {', '.join(map(repr, THINK_LEVELS))}, got {think!r}")
    if think is not False and not thinks:
        raise _bad("think", "this model does not support thinking (its chat template has no reasoning channel)")
    if isinstance(think, bool):
        return {"enable_thinking": think}
    return {"enable_thinking": True, "reasoning_effort": "high" if think == "max" else think}


def keep_alive_seconds(keep_alive: str | int | float | None) -> float | None:
    """A request's keep_alive in seconds (hearth.api.durations: negative is forever), None where none is given
    (the model keeps the one it has, as Ollama's scheduler keeps a runner's); a bad one is a 400 naming it."""
    if keep_alive is None:
        return None
    try:
        return durations.seconds(keep_alive)
    except ValueError:
        raise _bad("keep_alive", f'must be a number of seconds or a duration such as "5m" or "0", got {keep_alive!r}') from None


def unloads_now(keep_alive: str | int | float | None) -> bool:
    """keep_alive 0 (a number of seconds, or a Go duration such as "0", "0s", "0m"): the routes unload the model,
    at once where the request has nothing to answer (`ollama stop`), else once it is answered; any other sets
    how long it stays once idle (ModelPool.keep)."""
    return keep_alive_seconds(keep_alive) == 0


def asked_logprobs(body, served) -> int | None:
    """`logprobs: true` -> the top-k to return with each token (`top_logprobs`, 0 by default; its range is
    the server's --max-logprobs, Ollama's 0 to 20 by default); None: none asked (top_logprobs alone asks none,
    as Ollama reads it)."""
    if not body.logprobs:
        return None
    return check_logprobs("top_logprobs", body.top_logprobs or 0, served)
