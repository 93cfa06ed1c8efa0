"""Tiny random LoRA adapters in llama.cpp's GGUF form (convert_lora_to_gguf.py's keys and names)."""

from __future__ import annotations

import gguf
import numpy as np

from hearth.loader.gguf_loader import GGUFFile


def write_lora_gguf(path, base_path, targets: list[str], rank: int = 4, alpha: float | None = 8.0, seed: int = 0,
                    arch: str | None = None, adapter_type: str = "lora") -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """An adapter for `targets` (base tensor names, blk.0.attn_q.weight) of the base GGUF at base_path:
    lora_a [rank, in], lora_b [out, rank] (B not zero, as after training). Returns {name: (A, B)}."""
    base = GGUFFile(base_path)
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), arch or base.arch)
    w.add_type(gguf.GGUFType.ADAPTER)
    w.add_string(gguf.Keys.Adapter.TYPE, adapter_type)
    if alpha is not None:
        w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)
    pairs = {}
    for name in targets:
        out, k = base.tensors[name].shape
        a = (rng.standard_normal((rank, k)) / np.sqrt(k)).astype(np.float32)
        b = (rng.standard_normal((out, rank)) / np.sqrt(rank)).astype(np.float32)
        w.add_tensor(name + ".lora_a", a)
        w.add_tensor(name + ".lora_b", b)
        pairs[name] = (a, b)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return pairs


def merged(pairs: dict[str, tuple[np.ndarray, np.ndarray]], scale: float, alpha: float | None):
    """adjust for write_tiny_gguf: W + scale * (alpha / rank) * B @ A on the adapted tensors, in f32."""
    def adjust(name: str, value: np.ndarray) -> np.ndarray:
        if name not in pairs:
            return value
        a, b = pairs[name]
        factor = alpha / a.shape[0] if alpha else 1.0
        return (value + np.float32(scale * factor) * (b @ a)).astype(np.float32)
    return adjust
