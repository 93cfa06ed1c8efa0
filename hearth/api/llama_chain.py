"""llama-server's `samplers` (on /completion and /infill): which of llama.cpp's samplers run, as names
(`["top_k", "temperature"]`) or as one character each (`"kt"`), read as llama-server's params_from_json_cmpl
reads them (common_sampler_types_from_names / _from_chars in llama.cpp's common/sampling.cpp):

- a sampler left out of the list does not run: its SamplingParams value turned off (OFF); temperature left out
  samples at 1, as llama.cpp's chain then ends in `dist` over the untempered logits;
- an unknown name or character is skipped, as llama-server skips it with a warning; hearth names it in
  `x-hearth-ignored-fields` (`samplers[2]`) and logs it;
- a list naming one of llama.cpp's samplers hearth lacks (LACKING: infill, adaptive_p) is named so too, and not
  applied: the whole chain runs. The editors' list (llama.vim's and llama.vscode's `top_k, top_p, infill`) leans
  on infill's truncation (it drops the unlikely candidates); without it, leaving temperature and min_p out would
  sample their code at temperature 1 over 40 tokens, far more loosely than llama-server does;
- a non-string entry is a 400 naming it (`samplers[1]`), as llama-server's json conversion throws;
- with mirostat the list is not read (llama.cpp's mirostat chain is temperature and mirostat alone).
The order is hearth.sample's fixed one (llama.cpp's default chain's), not the list's."""

from __future__ import annotations

from hearth.api.ignored_fields import note

OFF = {
    "penalties": {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0},
    "dry": {"dry_multiplier": 0.0},
    "top_n_sigma": {"top_n_sigma": -1.0},
    "top_k": {"top_k": 0},
    "typ_p": {"typical_p": 1.0},
    "top_p": {"top_p": 1.0},
    "min_p": {"min_p": 0.0},
    "xtc": {"xtc_probability": 0.0},
    "temperature": {"temperature": 1.0},
}
"""llama-server's sampler name -> the SamplingParams values that leave it out."""

ORDER = ("penalties", "dry", "temperature", "top_n_sigma", "min_p", "top_k", "typ_p", "top_p", "xtc")
"""OFF's samplers in the order hearth.sample.sampler runs them (its fixed chain), as the replies list them."""

LACKING = ("infill", "adaptive_p")
"""llama.cpp's samplers hearth does not run."""

CHARS = {"e": "penalties", "d": "dry", "s": "top_n_sigma", "k": "top_k", "y": "typ_p", "p": "top_p", "m": "min_p",
         "x": "xtc", "t": "temperature", "i": "infill", "a": "adaptive_p"}
"""llama.cpp's common_sampler_type_to_chr, for `samplers` given as a string."""


def sampler_names(value):
    """`samplers` as a list: a string's characters as their names (an unknown one stays as it is, to be named);
    anything else as given, for the field's type to judge."""
    return [CHARS.get(c, c) for c in value] if isinstance(value, str) else value


def ran(samplers: list[str] | None) -> list[str]:
    """The names of the samplers a request runs, in ORDER (generation_settings' `samplers`): all of them where no list
    is given or it names one hearth lacks (left_out keeps the whole chain then), else the list's known ones. With
    mirostat too: llama-server echoes the list it read, though its mirostat chain does not read it."""
    if samplers is None or any(name in LACKING for name in samplers):
        return list(ORDER)
    return [name for name in ORDER if name in samplers]


def left_out(samplers: list[str] | None, mirostat: int) -> dict:
    """The SamplingParams values that turn off the samplers the list leaves out ({} where none is given, mirostat
    runs or the list names one hearth lacks); its names hearth does not run are noted for x-hearth-ignored-fields."""
    if samplers is None:
        return {}
    note({f"samplers[{i}]": None for i, name in enumerate(samplers) if name not in OFF}, frozenset())
    if mirostat or any(name in LACKING for name in samplers):
        return {}
    return {k: v for name, values in OFF.items() if name not in samplers for k, v in values.items()}
