"""A GGUF's own sampling defaults (general.sampling.*, which convert_hf_to_gguf copies from the model's
generation_config.json and llama.cpp starts from) as SamplingParams fields: what vLLM's
llm.get_default_sampling_params() gives from the same generation_config."""

from __future__ import annotations

from typing import Any

FILE_SAMPLING = {
    "general.sampling.temp": "temperature",
    "general.sampling.top_k": "top_k",
    "general.sampling.top_p": "top_p",
    "general.sampling.min_p": "min_p",
    "general.sampling.penalty_repeat": "repetition_penalty",
    "general.sampling.penalty_last_n": "repeat_last_n",
    "general.sampling.xtc_probability": "xtc_probability",
    "general.sampling.xtc_threshold": "xtc_threshold",
    "general.sampling.mirostat": "mirostat",
    "general.sampling.mirostat_tau": "mirostat_tau",
    "general.sampling.mirostat_eta": "mirostat_eta",
}
"""gguf-py's Keys.General.SAMPLING_* -> the SamplingParams field each sets (general.sampling.sequence, an order
of samplers, has none: hearth's order is fixed)."""


def file_sampling(g) -> dict[str, Any]:
    """The SamplingParams fields g's metadata sets (g: a GGUFFile, or anything with get(key))."""
    found = {field: g.get(key) for key, field in FILE_SAMPLING.items()}
    return {field: v.item() if hasattr(v, "item") else v for field, v in found.items() if v is not None}
