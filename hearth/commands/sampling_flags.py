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

LLAMA_SAMPLER_FLAGS: dict[str, tuple[tuple[str, ...], type]] = {
    "repeat_last_n": (("--repeat-last-n",), int),
    "dry_multiplier": (("--dry-multiplier",), float),
    "dry_base": (("--dry-base",), float),
    "dry_allowed_length": (("--dry-allowed-length",), int),
    "dry_penalty_last_n": (("--dry-penalty-last-n",), int),
    "xtc_probability": (("--xtc-probability",), float),
    "xtc_threshold": (("--xtc-threshold",), float),
    "top_n_sigma": (("--top-nsigma", "--top-n-sigma"), float),
    "mirostat": (("--mirostat",), int),
    "mirostat_eta": (("--mirostat-lr",), float),
    "mirostat_tau": (("--mirostat-ent",), float),
}
"""llama.cpp's samplers vLLM lacks (hearth.sample), by llama-cli's and llama-server's spellings (common/arg.cpp);
`hearth run` takes them as well as `hearth serve`."""
SAMPLING_FLAGS.update(LLAMA_SAMPLER_FLAGS)
_HELP = {
    "repeat_last_n": "the repeat/presence/frequency penalties read the context's last N tokens (0: off, -1: all; "
                     "unset: vLLM's rule, the whole prompt and output)",
    "dry_multiplier": "DRY: a token extending a repeat loses N * base ** (length - allowed length) (0: off)",
    "dry_base": "DRY's base (default 1.75)",
    "dry_allowed_length": "DRY: repeats up to this long are free (default 2)",
    "dry_penalty_last_n": "DRY scans the context's last N tokens (default 64; -1: all)",
    "xtc_probability": "XTC: with this probability drop every top choice but the least likely (0: off)",
    "xtc_threshold": "XTC: a top choice has at least this probability (default 0.1)",
    "top_n_sigma": "keep the tokens within N standard deviations of the top logit (<= 0: off)",
    "mirostat": "Mirostat 1 or 2 (0: off): replaces top-k/top-p/min-p/typical/top-nsigma/XTC; no drafts for it",
    "mirostat_eta": "Mirostat's learning rate, eta (default 0.1)",
    "mirostat_tau": "Mirostat's target entropy, tau (default 5.0)",
}


def llama_int(text: str) -> int:
    """An integer sampler flag as llama-server reads one (std::stoi): `--mirostat 2.0` is 2, as the API's integral
    floats are (hearth.api.llama_names.LlamaInt); a fraction is named, not cut to its integer as stoi cuts it."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, not {text!r}") from None
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"must be an integer, not {text!r}")
    return int(value)


def _flag_type(kind: type):
    return llama_int if kind is int else kind


BREAKER_FLAG = "--dry-sequence-breaker"
_ESCAPES = {"\\n": "\n", "\\t": "\t", "\\r": "\r"}


def add_llama_sampler_arguments(group, default_prefix: str = "") -> None:
    """LLAMA_SAMPLER_FLAGS and --dry-sequence-breaker on `group`, each None where not given (dest: the field,
    after default_prefix)."""
    for name, (flags, kind) in LLAMA_SAMPLER_FLAGS.items():
        group.add_argument(*flags, dest=f"{default_prefix}{name}", type=_flag_type(kind), default=None, metavar="N",
                           help=_HELP[name])
    group.add_argument(BREAKER_FLAG, dest=f"{default_prefix}dry_sequence_breakers", action="append", default=None,
                       metavar="STRING", help="a DRY sequence breaker (repeat for more; the first clears llama.cpp's "
                                              "defaults \\n : \" *; 'none': no breakers; \\n \\t read as escapes)")


def sampler_flag(field: str) -> str:
    """The flag that sets SamplingParams' `field` (its llama-cli spelling where it has one), for a one-line error."""
    if field == "dry_sequence_breakers":
        return BREAKER_FLAG
    return SAMPLING_FLAGS[field][0][0] if field in LLAMA_SAMPLER_FLAGS else f"--{field.replace('_', '-')}"


def breaker_list(given: list[str] | None) -> list[str] | None:
    """--dry-sequence-breaker's values as llama-cli reads them: 'none' clears the list; None: not given."""
    if given is None:
        return None
    out: list[str] = []
    for value in given:
        if value == "none":
            out = []
            continue
        for escaped, char in _ESCAPES.items():
            value = value.replace(escaped, char)
        out.append(value)
    return out

_OVERRIDE = "--override-generation-config"


def add_sampling_arguments(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("default sampling (a request's own fields win)")
    for name, (flags, kind) in SAMPLING_FLAGS.items():
        if name in LLAMA_SAMPLER_FLAGS:
            continue  # add_llama_sampler_arguments'
        group.add_argument(*flags, dest=f"default_{name}", type=_flag_type(kind), default=None, metavar="X",
                           help=f"{name} of a request that gives none (llama-server's {flags[0]}; default: the API's)")
    group.add_argument(_OVERRIDE, default=None, metavar="JSON",
                       help="vLLM's: the same defaults as a JSON object of its keys "
                            f"({', '.join(SAMPLING_FLAGS)}); a flag above wins over its key")
    add_llama_sampler_arguments(group, "default_")


def sampling_defaults(args: argparse.Namespace) -> dict[str, float]:
    """SamplingParams field -> the server's default, checked as a request's field is (one line naming the flag)."""
    from hearth.sampling_params import InvalidSamplingParams, SamplingParams

    given = {name: (f"{_OVERRIDE} {name}", v) for name, v in _override(getattr(args, "override_generation_config", None)).items()}
    for name, (flags, _) in SAMPLING_FLAGS.items():
        if (v := getattr(args, f"default_{name}", None)) is not None:
            given[name] = (flags[0], v)
    if (breakers := breaker_list(getattr(args, "default_dry_sequence_breakers", None))) is not None:
        given["dry_sequence_breakers"] = (BREAKER_FLAG, breakers)
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
