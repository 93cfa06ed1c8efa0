"""LLM(...)'s engine arguments read into an EngineConfig: vLLM's names taken (hearth.llm_vllm_args), and an
unknown name refused with the one it likely meant (llama-cpp-python's n_ctx, a typo of a field)."""

from __future__ import annotations

import difflib
from dataclasses import fields

from hearth.config import EngineConfig
from hearth.llm_vllm_args import VLLM_ARGS, take_vllm_args

PEER_ARGS = {"n_ctx": "max_model_len", "n_threads": "threads", "n_batch": "max_num_batched_tokens",
             "model_path": "model", "max_seq_len": "max_model_len", "max_model_length": "max_model_len"}
"""llama-cpp-python's Llama(...) and other engines' argument names -> LLM's (vLLM's names are LLM's own)."""


def engine_config(model: str, engine_args: dict) -> EngineConfig:
    """The EngineConfig LLM(model, **engine_args) asks for; an argument it has no field for is a TypeError."""
    engine_args = take_vllm_args(model, engine_args)  # gpu_memory_utilization, dtype, ...: mapped or noted
    known = {f.name for f in fields(EngineConfig)}
    unknown = sorted(set(engine_args) - known)
    if unknown:
        raise TypeError(f"unknown engine argument(s): {', '.join(map(_meant, unknown))}")
    return EngineConfig(model=model, **engine_args)


def _meant(name: str) -> str:
    """`n_ctx (LLM's max_model_len)`, `max_model_lenn (did you mean max_model_len?)`, or the name alone."""
    if name in PEER_ARGS:
        return f"{name} (LLM's {PEER_ARGS[name]})"
    close = difflib.get_close_matches(name, [f.name for f in fields(EngineConfig)] + list(VLLM_ARGS), n=1, cutoff=0.8)
    return f"{name} (did you mean {close[0]}?)" if close else name
