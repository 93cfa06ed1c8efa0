"""llama-server's spellings of sampling fields hearth names as OpenAI/vLLM do, one table for every route
that takes them: its own /completion and /infill (hearth.api.llama_protocol, hearth.api.llama_reply),
and OpenAI's /v1 routes, which llama-server's handlers read them on too (its params_from_json merges
its own names into an OpenAI body: n_predict beside max_tokens, repeat_penalty), and its samplers vLLM lacks
(LLAMA_SAMPLERS: repeat_last_n, dry_*, xtc_*, top_n_sigma, mirostat*), named as SamplingParams names them."""

from __future__ import annotations

import json
from typing import Annotated

from pydantic import BeforeValidator, StrictInt

LLAMA_WIRE_NAMES = {"max_tokens": "n_predict", "repetition_penalty": "repeat_penalty"}
"""SamplingParams fields by their llama-server names."""


LLAMA_SAMPLERS = ("repeat_last_n", "dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n",
                  "dry_sequence_breakers", "xtc_probability", "xtc_threshold", "top_n_sigma", "mirostat", "mirostat_tau",
                  "mirostat_eta")
"""llama.cpp's samplers hearth runs (hearth.sample), by llama-server's names, which SamplingParams shares: read on
its own routes and, as extension fields, on OpenAI's (llama-server's /v1 handlers read them too)."""


def _whole(value):
    """An integral float as its int (2.0 -> 2); a fraction is named, not truncated to 2 as llama-server's get<int>
    does without a word; anything else is StrictInt's to judge (a bool or a string stays a 400)."""
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"must be an integer, got {value}")
        return int(value)
    return value


LlamaInt = Annotated[StrictInt, BeforeValidator(_whole)]
"""An integer field by llama-server's name, read as its params parser reads one (nlohmann json's get<int> takes any
JSON number: Python clients send `"mirostat": 2.0`, and llama-server serves them): an integral float is that
integer. OpenAI's and Anthropic's own integers (max_tokens, n, seed, top_logprobs) stay StrictInt, as those APIs
answer a decimal number there with a 400."""


def breakers(value):
    """dry_sequence_breakers as llama-server takes it (a list of strings) or as text-generation-webui and
    SillyTavern send it (that list JSON-encoded in a string), else the value itself (SamplingParams names it)."""
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except ValueError:
            return value
        return decoded if isinstance(decoded, list) else value
    return value


def predict_limit(n: int) -> int | None:
    """n_predict as a max_tokens: any negative (llama.cpp's -1) is no limit (None), until an end token or
    the context is full; 0 is the prompt alone, which each route answers as its own max_tokens 0."""
    return None if n < 0 else n


LLAMA_READS = {"max_tokens": predict_limit}
"""A llama-server field's value -> the SamplingParams field's, where it is not the same value."""
