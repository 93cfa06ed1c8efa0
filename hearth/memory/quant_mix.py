"""Weights of a described model: the tensors llama.cpp's converter would write for a ModelShape,
each given the GGML type a quantization preset ("Q4_K_M", "Q8_0", ...) assigns it.

The type rules approximate llama.cpp's `llama-quant.cpp` for the common presets (checked against
real files in tests/memory/test_weights.py):
  - 1-D tensors (norms) and the MoE router stay F32;
  - the output head (or token_embd when the head is tied to it) gets `head` (Q6_K below 8 bits);
  - for *_K_M presets, attn_v and ffn_down use Q6_K in the "more bits" layers: the first and last
    eighth of the layers and every third one between (about half of them);
  - a row that does not split into whole blocks of the chosen type falls back to a legacy type of
    similar size (Q4_K -> Q5_0, Q6_K -> Q8_0, ...), as llama.cpp does for e.g. 640-wide rows.
Not modelled: the extra rules of the 2- and 3-bit presets, GQA/MoE-specific attn_v bumps, biases."""

from __future__ import annotations

from dataclasses import dataclass

from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q

from hearth.memory import PlanError
from hearth.memory.shape import ModelShape
from hearth.memory.weights import WeightTensor


@dataclass(frozen=True, slots=True)
class Mix:
    base: Q
    head: Q
    more_bits: Q | None = None
    """Type of attn_v / ffn_down in the use_more_bits layers (None = base everywhere)."""


MIXES: dict[str, Mix] = {
    "F32": Mix(Q.F32, Q.F32),
    "F16": Mix(Q.F16, Q.F16),
    "BF16": Mix(Q.BF16, Q.BF16),
    "Q8_0": Mix(Q.Q8_0, Q.Q8_0),
    "Q6_K": Mix(Q.Q6_K, Q.Q6_K),
    "Q5_K_M": Mix(Q.Q5_K, Q.Q6_K, more_bits=Q.Q6_K),
    "Q5_K_S": Mix(Q.Q5_K, Q.Q6_K),
    "Q4_K_M": Mix(Q.Q4_K, Q.Q6_K, more_bits=Q.Q6_K),
    "Q4_K_S": Mix(Q.Q4_K, Q.Q6_K),
    "Q5_1": Mix(Q.Q5_1, Q.Q6_K),
    "Q5_0": Mix(Q.Q5_0, Q.Q6_K),
    "Q4_1": Mix(Q.Q4_1, Q.Q6_K),
    "Q4_0": Mix(Q.Q4_0, Q.Q6_K),
    # llama.cpp also gives attn_v Q5_K in these two where a KV head serves >= 4 query heads (not modelled)
    "IQ4_XS": Mix(Q.IQ4_XS, Q.Q6_K),
    "IQ4_NL": Mix(Q.IQ4_NL, Q.Q6_K),
}

# a 256-wide k-quant block that does not fit a row falls back to a 32-wide type of similar size
FALLBACK = {Q.Q2_K: Q.Q4_0, Q.Q3_K: Q.Q4_0, Q.Q4_K: Q.Q5_0, Q.Q5_K: Q.Q5_1, Q.Q6_K: Q.Q8_0, Q.IQ4_XS: Q.IQ4_NL}
MORE_BITS_TENSORS = ("attn_v", "ffn_down", "ffn_down_exps")


def mix(name: str) -> Mix:
    try:
        return MIXES[name.upper()]
    except KeyError:
        raise PlanError(f"unknown weight quantization {name!r}; known: {', '.join(MIXES)}") from None


def use_more_bits(layer: int, layers: int) -> bool:
    """First and last eighth of the layers, and every third layer in between."""
    eighth = layers // 8
    return layer < eighth or layer >= 7 * layers // 8 or (layer - eighth) % 3 == 2


def synthesize(shape: ModelShape, quant: str) -> list[WeightTensor]:
    """Every tensor of the described model, in llama.cpp's naming, typed by the preset `quant`."""
    m = mix(quant)
    h, v = shape.hidden_size, shape.vocab_size
    out = [_typed("token_embd.weight", (v, h), m.head if shape.tied_embeddings else m.base)]
    for i in range(shape.num_layers):
        for name, dims in _layer_tensors(shape, i):
            out.append(_typed(f"blk.{i}.{name}.weight", dims, _layer_type(m, name, dims, i, shape.num_layers)))
    out.append(_typed("output_norm.weight", (h,), Q.F32))
    if not shape.tied_embeddings:
        out.append(_typed("output.weight", (v, h), m.head))
    return out


def _layer_tensors(s: ModelShape, i: int) -> list[tuple[str, tuple[int, ...]]]:
    h, kv = s.hidden_size, s.kv_heads[i]
    names = [("attn_norm", (h,)), ("attn_q", (s.q_dim, h)), ("attn_k", (kv * s.head_dim_k, h)),
             ("attn_v", (kv * s.head_dim_v, h)), ("attn_output", (h, s.attn_out_dim)), ("ffn_norm", (h,))]
    if not s.is_moe:
        return names + [("ffn_gate", (s.ffn, h)), ("ffn_up", (s.ffn, h)), ("ffn_down", (h, s.ffn))]
    e, f = s.num_experts, s.expert_ffn
    names += [("ffn_gate_inp", (e, h)), ("ffn_gate_exps", (e, f, h)), ("ffn_up_exps", (e, f, h)),
              ("ffn_down_exps", (e, h, f))]
    if s.shared_ffn:
        sf = s.shared_ffn
        names += [("ffn_gate_shexp", (sf, h)), ("ffn_up_shexp", (sf, h)), ("ffn_down_shexp", (h, sf))]
    return names


def _layer_type(m: Mix, name: str, dims: tuple[int, ...], layer: int, layers: int) -> Q:
    if len(dims) == 1 or name == "ffn_gate_inp":
        return Q.F32
    if m.more_bits is not None and name in MORE_BITS_TENSORS and use_more_bits(layer, layers):
        return m.more_bits
    return m.base


def _typed(name: str, dims: tuple[int, ...], qtype: Q) -> WeightTensor:
    row = dims[-1]  # the innermost (in_features) dimension is what blocks tile
    while row % GGML_QUANT_SIZES[qtype][0]:
        qtype = FALLBACK.get(qtype, Q.F16)
    return WeightTensor(name, qtype, dims)
