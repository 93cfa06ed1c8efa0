"""A random-weight GGUF with Qwen3.5-0.8B's shapes, written as llama.cpp's converter writes a Q8_0 file: the
speed of hearth's qwen35 path against llama.cpp's, where no real Qwen3.5 weights are at hand (speed does not
depend on the values; greedy text from random weights means nothing).

    /work/main/.venv/bin/python benchmarks/qwen35_shapes.py /tmp/qwen35-0.8b-q8_0.gguf [Q8_0|F32]

Shapes: Qwen/Qwen3.5-0.8B's text_config (hidden 1024, 24 layers, three Gated DeltaNet layers to one gated
attention layer, 16 key and 16 value heads of 128 dims, conv kernel 4, 8 query / 2 KV heads of 256 with a
quarter rotated, MLP 3584, vocab 248320, tied embeddings). The tensors come from transformers'
Qwen3_5ForCausalLM built on the meta device, each drawn at random as tests/qwen35_factory.py draws the tiny
model's, one at a time (the f32 model would take 3 GB), and converted by that factory's writer."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import transformers

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.gguf_factory import TinyDims  # noqa: E402
from tests.qwen35_factory import Linear, hf_config, write_qwen35_gguf  # noqa: E402

LAYERS = 24
LAYER_TYPES = tuple("full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(LAYERS))
DIMS = TinyDims(layers=LAYERS, hidden=1024, heads=8, kv_heads=2, head_dim=256, ffn=3584, vocab=248320,
                context=4096, rope_theta=1e7, rms_eps=1e-6)
LIN = Linear(k_heads=16, v_heads=16, k_dim=128, v_dim=128, kernel=4)
SECTIONS = [11, 11, 10]  # 64 rotated dims: head_dim 256 x partial 0.25


def meta_model() -> torch.nn.Module:
    """Qwen3.5-0.8B's text model without storage: its parameter names and shapes."""
    cfg = hf_config(DIMS, LIN, layer_types=LAYER_TYPES, sections=SECTIONS)
    with torch.device("meta"):
        return transformers.Qwen3_5ForCausalLM(cfg)


def drawn(name: str, shape: torch.Size, g: torch.Generator) -> torch.Tensor:
    """One tensor at random, as tests/qwen35_factory.hf_qwen35 draws them."""
    if name.endswith("linear_attn.norm.weight"):
        return 1 + 0.2 * torch.randn(shape, generator=g)
    if "norm" in name:
        return 0.2 * torch.randn(shape, generator=g)
    if name.endswith("A_log"):
        return torch.log(torch.empty(shape).uniform_(0.02, 1, generator=g))
    if name.endswith("dt_bias"):
        return torch.randn(shape, generator=g)
    if "conv1d" in name:
        return 0.5 * torch.randn(shape, generator=g)
    return torch.randn(shape, generator=g) / shape[-1] ** 0.5


class LazyState:
    """A model whose state_dict() draws each tensor when the writer reaches it (one in memory at a time)."""

    def __init__(self, model: torch.nn.Module, seed: int = 0):
        self.shapes = {n: p.shape for n, p in model.named_parameters()}
        self.g = torch.Generator().manual_seed(seed)

    def state_dict(self):
        return self

    def items(self):
        for name, shape in self.shapes.items():
            yield name, drawn(name, shape, self.g)


def write(path: Path, qtype: str = "Q8_0") -> Path:
    return write_qwen35_gguf(path, LazyState(meta_model()), qtype, DIMS, LIN, layer_types=LAYER_TYPES,
                             sections=SECTIONS)


if __name__ == "__main__":
    print(write(Path(sys.argv[1]), *(sys.argv[2:3] or ["Q8_0"])))
