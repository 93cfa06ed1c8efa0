"""Tiny random models whose layers are not all alike, as GGUFs (for the quantized KV cache's tests): gemma4 E2B-shaped
(KV-shared layers, head dims 32 and 64), gemma4 31B-shaped (per-layer KV heads: 2 sliding, 1 global), qwen35 (Gated
DeltaNet layers, a state slot per sequence) and lfm2 (short-conv layers, their input per token in the cache; head dim
32 so that q8_0 and q4_0, 32-value blocks, take its attention layers)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tests.gemma4_factory import DENSE_LIKE, E2B_LIKE, hf_gemma4, write_gemma4_gguf
from tests.lfm2_factory import DIMS as LFM2_DIMS
from tests.lfm2_factory import hf_lfm2, write_lfm2_gguf
from tests.qwen35_factory import hf_qwen35, write_qwen35_gguf

GEMMA4_512 = replace(E2B_LIKE, head_dim=256, global_head_dim=512)
"""The E2B shape at the real head dims (256 sliding, 512 global): the native kernels' widest."""
LFM2_32 = replace(LFM2_DIMS, hidden=128, head_dim=32)

WRITERS = {
    "gemma4-e2b": lambda p: write_gemma4_gguf(p, hf_gemma4(E2B_LIKE), E2B_LIKE),
    "gemma4-e2b-q8": lambda p: write_gemma4_gguf(p, hf_gemma4(E2B_LIKE, seed=4), E2B_LIKE, qtype="Q8_0"),
    "gemma4-512-q8": lambda p: write_gemma4_gguf(p, hf_gemma4(GEMMA4_512, seed=4), GEMMA4_512, qtype="Q8_0"),
    "gemma4-31b": lambda p: write_gemma4_gguf(p, hf_gemma4(DENSE_LIKE), DENSE_LIKE),
    "qwen35": lambda p: write_qwen35_gguf(p, hf_qwen35()),
    "lfm2": lambda p: write_lfm2_gguf(p, hf_lfm2(d=LFM2_32), d=LFM2_32),
}
"""Name -> write(path) of its GGUF (F32 but the -q8 one, whose Q8_0 weights take the native layers' paths;
vocabulary 320, context 256)."""


def write(name: str, folder: Path) -> Path:
    path = folder / f"tiny-{name}.gguf"
    if not path.exists():
        WRITERS[name](path)
    return path
