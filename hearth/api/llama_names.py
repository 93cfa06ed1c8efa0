"""llama-server's spellings of sampling fields hearth names as OpenAI/vLLM do, one table for every route
that takes them: its own /completion and /infill (hearth.api.llama_protocol, hearth.api.llama_reply),
and OpenAI's /v1 routes, which llama-server's handlers read them on too (its params_from_json merges
its own names into an OpenAI body: n_predict beside max_tokens, repeat_penalty). Its repeat_last_n,
mirostat, dry_* ... have no hearth equivalent: ignored and named in x-hearth-ignored-fields."""

from __future__ import annotations

LLAMA_WIRE_NAMES = {"max_tokens": "n_predict", "repetition_penalty": "repeat_penalty"}
"""SamplingParams fields by their llama-server names."""


def predict_limit(n: int) -> int | None:
    """n_predict as a max_tokens: any negative (llama.cpp's -1) is no limit (None), until an end token or
    the context is full; 0 is the prompt alone, which each route answers as its own max_tokens 0."""
    return None if n < 0 else n


LLAMA_READS = {"max_tokens": predict_limit}
"""A llama-server field's value -> the SamplingParams field's, where it is not the same value."""
