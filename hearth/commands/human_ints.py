"""vLLM's human-readable integers on hearth's flags (its human_readable_int): 8192, 32k (a lowercase suffix is
decimal: 32,000; 25.6k: 25,600), 32K (an uppercase one binary: 32,768), so a vLLM command line runs unchanged."""

from __future__ import annotations

import argparse

_SUFFIXES = {"k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}
"""suffix -> its multiplier, vLLM's."""


def human_int(text: str, what: str) -> int:
    """The integer `text` spells; argparse's one line naming `what` (its examples) where it spells none."""
    text = text.strip()
    number, suffix = (text[:-1], text[-1]) if text[-1:] in _SUFFIXES else (text, "")
    scale = _SUFFIXES.get(suffix, 1)
    try:  # a decimal point only before a decimal suffix, as vLLM's
        return int(float(number) * scale) if suffix.islower() else int(number) * scale
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"must be {what}, not {text!r}") from None


def token_count(text: str) -> int:
    """--max-model-len as vLLM reads it: 8192, 32k, 32K, or auto (hearth's 0: the model's own, lowered to fit)."""
    return 0 if text.strip() == "auto" else human_int(text, "a number of tokens (8192, 32k, 32K or auto)")


def gib_of_bytes(text: str) -> float:
    """vLLM's --kv-cache-memory-bytes (4294967296, 4G) -> hearth's --kv-cache-memory-gb, which counts GiB."""
    return human_int(text, "a number of bytes (4294967296, 4G or 4g)") / 2**30
