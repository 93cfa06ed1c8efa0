"""The LLM's LoRA adapters (EngineConfig.lora): read and checked before the model loads, attached to it
after (hearth.models.lora), and their table for the engine (hearth.engine.lora_adapters)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path

from hearth.engine.lora_adapters import LoraAdapters
from hearth.errors import HearthError
from hearth.loader.fingerprint import model_fingerprint
from hearth.loader.lora_file import LoraFile, read_lora
from hearth.models.lora import attach_lora

log = logging.getLogger("hearth")


def read_adapters(entries: list) -> list[LoraFile]:
    """EngineConfig.lora's files, each checked to be a LoRA adapter; a bad entry is one line."""
    files = []
    for entry in entries:
        if not isinstance(entry, (list, tuple)) or len(entry) != 2 or isinstance(entry[1], bool) \
                or not isinstance(entry[1], (int, float)) or not math.isfinite(entry[1]):
            raise HearthError(f"--lora-scaled takes FILE SCALE (a finite number), not {entry!r}")
        files.append(read_lora(Path(entry[0]).expanduser()))
    return files


def attach(model, g, files: list[LoraFile], entries: list) -> LoraAdapters | None:
    """The adapters on the model, and the engine's table of them (None: no adapters)."""
    if not files:
        return None
    attach_lora(model, g, files)
    for j, (f, (_, scale)) in enumerate(zip(files, entries)):  # as llama-server lists them at start
        log.info("LoRA adapter %d: %s at scale %g", j, f.path, scale)
    return LoraAdapters([str(f.path) for f in files], [float(s) for _, s in entries],
                        [model_fingerprint(f.path) for f in files])


@dataclass(frozen=True, slots=True)
class LoRARequest:
    """vLLM's LoRARequest (vllm.lora.request): a request run with this adapter alone, at scale 1. hearth loads
    adapters at start (LLM(..., lora=[(path, scale), ...])): lora_path names one of them."""

    lora_name: str
    lora_int_id: int
    lora_path: str = ""


def request_lora(adapters: LoraAdapters | None, request) -> dict[int, float] | None:
    """A LoRARequest (or any object with vLLM's lora_path) as SamplingParams.lora: its adapter at 1, the
    others at 0; None: no request. An adapter the LLM did not load is a ValueError saying how to load it."""
    if request is None:
        return None
    path = getattr(request, "lora_path", None)
    loaded = [str(Path(p).expanduser().resolve()) for p in (adapters.paths if adapters is not None else [])]
    want = str(Path(path).expanduser().resolve()) if isinstance(path, (str, Path)) and path else None
    if want is None or want not in loaded:
        raise ValueError(f"lora_request: {path!r} is not one of this LLM's adapters ({', '.join(loaded) or 'none'}); "
                         "hearth loads GGUF adapters at start: LLM(..., lora=[(path, 1.0)])")
    return {loaded.index(want): 1.0}
