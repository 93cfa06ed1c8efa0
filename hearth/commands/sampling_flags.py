"""The server's default sampling, as llama-server's flags (--temp 0.7 --top-p 0.8 --top-k 20, as model cards
give them) and vLLM's --override-generation-config '{"temperature": 0.7, ...}' set it: a request that does not
give a field gets the server's value; a request's own value always wins (hearth.api.sampling.Limits.defaults).
A bad value is one line naming the flag (or the JSON key), before any model loads."""

from __future__ import annotations

import argparse

from hearth.commands.json_flag import json_flag
from hearth.errors import HearthError

SAMPLING_FLAGS: dict[str, tuple[tuple[str, ...], type]] = {
    "temperature": (("--temp", "--temperature"), float),
    "top_p": (("--top-p",), float),
    "top_k": (("--top-k",), int),
    "min_p": (("--min-p",), float),
    "typical_p": (("--typical", "--typical-p"), float),
    "repetition_penalty": (("--repeat-penalty", "--repetition-penalty"), float),
    "presence_penalty": (("--presence-penalty",), float),
    "frequency_penalty": (("--frequency-penalty",), float),
}
"""SamplingParams field (vLLM's generation-config key too) -> its flags (llama-server's spelling first), type."""

_OVERRIDE = "--override-generation-config"


def add_sampling_arguments(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("default sampling (a request's own fields win)")
    for name, (flags, kind) in SAMPLING_FLAGS.items():
        group.add_argument(*flags, dest=f"default_{name}", type=kind, default=None, metavar="X",
                           help=f"{name} of a request that gives none (llama-server's {flags[0]}; default: the API's)")
    group.add_argument(_OVERRIDE, default=None, metavar="JSON",
                       help="vLLM's: the same defaults as a JSON object of its keys "
                            f"({', '.join(SAMPLING_FLAGS)}); a flag above wins over its key")


def sampling_defaults(args: argparse.Namespace) -> dict[str, float]:
    """SamplingParams field -> the server's default, checked as a request's field is (one line naming the flag)."""
    from hearth.sampling_params import InvalidSamplingParams, SamplingParams

    given = {name: (f"{_OVERRIDE} {name}", v) for name, v in _override(getattr(args, "override_generation_config", None)).items()}
    for name, (flags, _) in SAMPLING_FLAGS.items():
        if (v := getattr(args, f"default_{name}", None)) is not None:
            given[name] = (flags[0], v)
    for name, (flag, value) in given.items():
        try:
            SamplingParams(**{name: value})
        except InvalidSamplingParams as e:
            raise HearthError(f"{flag} {e.why}") from None
    return {name: value for name, (_, value) in given.items()}


def _override(text: str | None) -> dict[str, float]:
    """vLLM's --override-generation-config JSON -> {field: value}; an unknown key or a value of the wrong type
    is one line naming it."""
    given = json_flag(_OVERRIDE, text, "sampling defaults")
    out = {}
    for key, value in given.items():
        if key not in SAMPLING_FLAGS:
            raise HearthError(f"{_OVERRIDE}: hearth has no generation-config key {key!r}; it takes "
                              f"{', '.join(SAMPLING_FLAGS)}")
        kind = SAMPLING_FLAGS[key][1]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or kind is int and not isinstance(value, int):
            raise HearthError(f"{_OVERRIDE} {key} must be {'an integer' if kind is int else 'a number'}, got {value!r}")
        out[key] = kind(value)
    return out
