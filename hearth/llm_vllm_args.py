"""vLLM's LLM(...) arguments that name no EngineConfig field: taken as a vLLM script passes them, each either
mapped onto hearth's own setting or, where it means nothing for a GGUF run on this engine, one log line saying
so. They raised TypeError ("unknown engine argument"), so a vLLM example failed before loading anything."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import MISSING, fields
from typing import Any

from hearth.config import EngineConfig

log = logging.getLogger("hearth")

Rule = Callable[[Any, dict], str | None]
"""(the value, the engine args being built) -> a note to log (None: nothing to say); may set engine args."""


def _unused(why: str, default: Any = None) -> Rule:
    """An argument with no effect here: noted unless it holds vLLM's default (or None)."""
    def rule(value: Any, _args: dict) -> str | None:
        return None if value is None or value == default else why
    return rule


def _kv_bytes(value: Any, args: dict) -> None:
    args.setdefault("kv_cache_memory_gb", value / 2**30)  # the same budget: hearth's KV cache in GB


def _tokenizer(value: Any, args: dict) -> str | None:
    same = value is None or str(value) == str(args.get("model"))
    return None if same else "hearth reads the tokenizer from the GGUF file (its vocabulary is the model's)"


VLLM_ARGS: dict[str, Rule] = {
    "tokenizer": _tokenizer,
    "dtype": _unused("weights stay in the GGUF's own formats (quantized blocks, F16, BF16)", "auto"),
    "quantization": _unused("the GGUF's block formats are its quantization"),
    "load_format": _unused("hearth loads GGUF files", "auto"),
    "trust_remote_code": _unused("a GGUF runs no model code", False),
    "revision": _unused("a GGUF file has no revisions"),
    "tokenizer_revision": _unused("a GGUF file has no revisions"),
    "tokenizer_mode": _unused("hearth reads the tokenizer from the GGUF file", "auto"),
    "download_dir": _unused("models live in hearth's model folder (HEARTH_HOME; `hearth pull`)"),
    "gpu_memory_utilization": _unused("the KV cache is sized by kv_cache_memory_gb (or num_kv_blocks), not "
                                      "a fraction of device memory", 0.9),
    "kv_cache_memory_bytes": _kv_bytes,
    "swap_space": _unused("a preempted request is recomputed, never swapped"),
    "cpu_offload_gb": _unused("weights are memory-mapped from the file"),
    "tensor_parallel_size": _unused("hearth runs a model on one device", 1),
    "pipeline_parallel_size": _unused("hearth runs a model on one device", 1),
    "enforce_eager": _unused("hearth captures no CUDA graphs", False),
    "disable_custom_all_reduce": _unused("hearth runs a model on one device", False),
    "disable_log_stats": _unused("hearth keeps no periodic stats log", True),
    "compilation_config": _unused("hearth has no compilation config"),
    "enable_lora": _unused("LoRA adapters are GGUF files given as lora=[(path, scale), ...]", False),
    "max_lora_rank": _unused("an adapter's rank is its file's"),
    "max_loras": _unused("every adapter in lora=[...] is loaded"),
    "max_cpu_loras": _unused("every adapter in lora=[...] is loaded"),
    "enable_chunked_prefill": _unused("hearth always chunks a prompt to max_num_batched_tokens per step", True),
    "max_seq_len_to_capture": _unused("hearth captures no CUDA graphs"),
    "hf_token": _unused("models are GGUF files; a hub reference org/repo:file.gguf reads HF_TOKEN"),
    "generation_config": _unused("get_default_sampling_params() reads the GGUF's general.sampling.* keys", "auto"),
    "limit_mm_per_prompt": _unused("images are limited by max_num_batched_tokens (an mmproj's rows per step)"),
    "enable_sleep_mode": _unused("hearth has no sleep mode", False),
}
"""vLLM's argument -> how hearth takes it."""


def take_vllm_args(model: str, engine_args: dict) -> dict:
    """engine_args less vLLM's arguments in VLLM_ARGS, each mapped into the result or noted in one log line, and
    less a None where EngineConfig's default is not None."""
    # vLLM's engine arguments are Optional, None meaning the engine's default (max_model_len=None: the model's)
    dropped = {f.name for f in fields(EngineConfig) if f.default is not None or f.default_factory is not MISSING}
    out = {k: v for k, v in engine_args.items() if k not in VLLM_ARGS and not (v is None and k in dropped)}
    out["model"] = model  # what `tokenizer` is compared with
    for name, value in engine_args.items():
        if name in VLLM_ARGS and (note := VLLM_ARGS[name](value, out)) is not None:
            log.warning("vLLM's %s=%r has no effect in hearth: %s", name, value, note)
    del out["model"]
    return out
