"""LoRA adapters in llama.cpp's GGUF form (convert_lora_to_gguf.py; read by llama-adapter.cpp).

An adapter file says `general.type = "adapter"`, `adapter.type = "lora"`, the base model's
`general.architecture` and `adapter.lora.alpha` (f32; absent or 0: no alpha/rank factor). Each adapted
matrix W [out, in] of the base (named as in the base GGUF, ".weight" included) has a pair
`<name>.lora_a` [rank, in] and `<name>.lora_b` [out, rank] (torch order; PEFT's lora_A / lora_B), and
the layer computes W x + scale * (alpha / rank) * B (A x), rank being B's columns (llama-adapter.h's
get_scale). Norm vectors some tools add (`*_norm.weight`) are skipped, as llama.cpp skips them."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from gguf.quants import dequantize

from hearth.errors import ModelLoadError
from hearth.loader.gguf_loader import GGUFFile, GGUFTensor

log = logging.getLogger("hearth")

SUFFIXES = (".lora_a", ".lora_b")


@dataclass(frozen=True, slots=True)
class LoraPair:
    a: torch.Tensor
    """[rank, in] f32."""
    b: torch.Tensor
    """[out, rank] f32."""

    @property
    def rank(self) -> int:
        return self.b.shape[1]


@dataclass(frozen=True, slots=True)
class LoraFile:
    path: Path
    arch: str
    alpha: float
    """adapter.lora.alpha; 0: the pairs are applied with the scale alone (llama.cpp's rule)."""
    pairs: dict[str, LoraPair]
    """Base tensor name (blk.0.attn_q.weight) -> its low-rank pair."""

    def factor(self, pair: LoraPair) -> float:
        """What scale 1 multiplies B (A x) by: alpha / rank, or 1 without an alpha."""
        return self.alpha / pair.rank if self.alpha else 1.0


def read_lora(path: str | os.PathLike) -> LoraFile:
    """An adapter file's pairs as f32 copies (they are small), or one ModelLoadError line naming the file."""
    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(f"LoRA adapter {path}: no such file")
    g = GGUFFile(path)
    kind, adapter = g.get("general.type"), g.get("adapter.type")
    if kind != "adapter" or adapter != "lora":
        raise ModelLoadError(f"{path}: not a LoRA adapter (general.type {kind!r}, adapter.type {adapter!r}; a LoRA "
                             "adapter GGUF has 'adapter' and 'lora', as llama.cpp's convert_lora_to_gguf.py writes)")
    halves: dict[str, dict[str, GGUFTensor]] = {}
    for name, t in g.tensors.items():
        suffix = next((s for s in SUFFIXES if name.endswith(s)), None)
        if suffix is None:
            if name.endswith("_norm.weight"):  # llama.cpp skips these too
                log.warning("%s: %s is not a LoRA pair: skipped", path.name, name)
                continue
            raise ModelLoadError(f"{path}: tensor {name!r} is neither a .lora_a nor a .lora_b")
        halves.setdefault(name[:-len(suffix)], {})[suffix] = t
    pairs = {}
    for base, ab in halves.items():
        if len(ab) != 2:
            raise ModelLoadError(f"{path}: {base} has {', '.join(ab)} without its other half")
        a, b = (_f32(ab[s]) for s in SUFFIXES)
        if a.dim() != 2 or b.dim() != 2 or a.shape[0] != b.shape[1]:
            raise ModelLoadError(f"{path}: {base}: lora_a {tuple(a.shape)} and lora_b {tuple(b.shape)} are not "
                                 "[rank, in] and [out, rank]")
        pairs[base] = LoraPair(a, b)
    if not pairs:
        raise ModelLoadError(f"{path}: the adapter holds no lora_a / lora_b pairs")
    return LoraFile(path, g.arch, float(g.get("adapter.lora.alpha", 0.0) or 0.0), pairs)


def _f32(t: GGUFTensor) -> torch.Tensor:
    # gguf-py's dequantize (the bit-exact reference): adapters are small, read once
    return torch.from_numpy(np.ascontiguousarray(dequantize(t.data, t.qtype), dtype=np.float32).reshape(t.shape).copy())
