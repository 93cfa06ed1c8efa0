"""The weight inventory: every tensor's name, GGML type and shape, and what a token reads of it.

From a GGUF the inventory is the file's own tensor table, so bytes are exact; from a description it
is synthesized with the same names (hearth.memory.quant_mix). Everything after that is one code path."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from hearth.loader.gguf_loader import GGUFFile
from hearth.memory.shape import ModelShape


@dataclass(frozen=True, slots=True)
class WeightTensor:
    name: str
    qtype: GGMLQuantizationType
    shape: tuple[int, ...]
    """Torch order, outermost first: a linear weight is (out_features, in_features)."""

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def n_bytes(self) -> int:
        # a row is stored as whole blocks of `block` values, `size` bytes each (ggml's type traits)
        block, size = GGML_QUANT_SIZES[self.qtype]
        return self.n_elements // block * size

    @property
    def is_matrix(self) -> bool:
        return len(self.shape) >= 2


def tensors_from_gguf(g: GGUFFile) -> list[WeightTensor]:
    return [WeightTensor(t.name, t.qtype, t.shape) for t in g.tensors.values()]


def weight_bytes(tensors: list[WeightTensor]) -> int:
    return sum(t.n_bytes for t in tensors)


def role(t: WeightTensor, shape: ModelShape) -> str:
    """embedding (a few rows read per token), head (read whole per token's logits), experts (only
    the routed ones are read) or dense (read whole)."""
    if t.name == "token_embd.weight":
        return "head" if shape.tied_embeddings else "embedding"
    if t.name == "output.weight":
        return "head"
    if t.name == "per_layer_token_embd.weight":  # gemma4's per-layer embeddings: a token reads its row
        return "embedding"
    return "experts" if "_exps." in t.name else "dense"


def experts_touched(shape: ModelShape, concurrency: int) -> float:
    """Expected fraction of a layer's experts that C sequences route to in one step, if routing is
    uniform: 1 - (1 - k/E)^C (k active of E). One sequence: exactly k/E."""
    if not shape.is_moe:
        return 1.0
    return 1.0 - (1.0 - shape.active_experts / shape.num_experts) ** concurrency


def _read_fraction(t: WeightTensor, shape: ModelShape, concurrency: int) -> float:
    r = role(t, shape)
    if r == "embedding":
        return min(1.0, concurrency / t.shape[0])  # one row per sequence
    if r == "experts":
        return experts_touched(shape, concurrency)
    return 1.0


def decode_weight_bytes(tensors: list[WeightTensor], shape: ModelShape, concurrency: int = 1) -> float:
    """Weight bytes one decode step reads for `concurrency` sequences (each token of the step shares
    the read): dense tensors and the head whole, embedding rows, the experts the step routes to."""
    return sum(t.n_bytes * _read_fraction(t, shape, concurrency) for t in tensors)


def active_matmul_params(tensors: list[WeightTensor], shape: ModelShape, with_head: bool) -> float:
    """Weights one token multiplies by (2 FLOPs each): dense matrices, its k of E experts, and the
    output head when the token needs logits (decode: every token; prefill: only the last)."""
    total = 0.0
    for t in tensors:
        r = role(t, shape)
        if not t.is_matrix or r == "embedding" or (r == "head" and not with_head):
            continue
        share = shape.active_experts / shape.num_experts if r == "experts" else 1.0
        total += t.n_elements * share
    return total


def bytes_by_type(tensors: list[WeightTensor]) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in tensors:
        out[t.qtype.name] = out.get(t.qtype.name, 0) + t.n_bytes
    return out
