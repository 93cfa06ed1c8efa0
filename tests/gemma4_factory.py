"""A tiny random Gemma 4 from transformers (Gemma4ForCausalLM, f32, eager), written as a GGUF the way llama.cpp's
converter writes it: conversion/gemma.py Gemma4Model (over Gemma3Model and TextModel's set_gguf_parameters in
conversion/base.py) and gguf-py's tensor map for MODEL_ARCH.GEMMA4:
- the global layers' head dim in attention.key_length / value_length and rope.dimension_count, the sliding ones'
  in key_length_swa / value_length_swa and rope.dimension_count_swa; rope.freq_base the global theta,
  rope.freq_base_swa the sliding one; attention.sliding_window_pattern a bool per layer;
- attention.shared_kv_layers, embedding_length_per_layer_input; feed_forward_length per layer where
  use_double_wide_mlp doubles the KV-shared layers'; head_count_kv per layer where the global layers have their own;
- rope_freqs.weight (generate_extra_tensors): 1.0 for the pairs the proportional rope turns, 1e30 for the rest;
- norms stored as they are (norm_shift 0), layer_scalar as blk.N.layer_output_scale.weight, no tensors for a
  KV-shared layer's k/v or for v_norm (it has no weight);
- the tokenizer as set_vocab writes it: tokenizer.ggml.model "gemma4", SentencePiece pieces with scores and types,
  BPE merges, add_bos_token true, add_space_prefix false."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import gguf
import numpy as np
import torch
import transformers

from tests.gguf_factory import MATRIX_TYPES, WORDS, _add_tensor, _grow, _spm_vocab


@dataclass(frozen=True, slots=True)
class Gemma4Dims:
    layer_types: tuple[str, ...] = ("sliding_attention", "full_attention", "sliding_attention", "sliding_attention",
                                    "full_attention", "sliding_attention", "full_attention")
    kv_shared: int = 2
    """The last two read layers 3 (sliding) and 4 (global): the last unshared one global, the one before it sliding,
    as in every released file (llama.cpp's reuse rule and transformers' agree there)."""
    hidden: int = 64
    heads: int = 4
    kv_heads: int = 1
    global_kv_heads: int | None = None
    """num_global_key_value_heads (the 31B's; with attention_k_eq_v)."""
    head_dim: int = 32
    global_head_dim: int = 64
    ffn: int = 96
    vocab: int = 320
    per_layer: int = 8
    window: int = 5
    context: int = 256
    double_wide: bool = True
    k_eq_v: bool = False
    softcap: float = 30.0
    rms_eps: float = 1e-6
    experts: int = 0
    specials: tuple[str, ...] = ()
    """Control tokens at the vocabulary's end (Gemma 4's image tokens for tests/test_llm_vision_gemma4.py)."""
    """enable_moe_block: routed experts beside each layer's dense MLP (the 26B-A4B's), top 2, each 32 wide."""

    @property
    def layers(self) -> int:
        return len(self.layer_types)


E2B_LIKE = Gemma4Dims()
"""PLE, KV sharing, two head dims, double-wide MLPs on the shared layers (E2B/E4B's shape)."""
DENSE_LIKE = Gemma4Dims(layer_types=("sliding_attention", "sliding_attention", "full_attention", "sliding_attention",
                                     "full_attention"), kv_shared=0, per_layer=0, double_wide=False, k_eq_v=True,
                        kv_heads=2, global_kv_heads=1)
"""The 31B's shape: no PLE, no sharing, K reused as V and their own KV heads on the global layers."""
MOE_LIKE = replace(DENSE_LIKE, experts=4)
"""The 26B-A4B's shape: the 31B's with routed experts in every layer."""
EXPERTS_USED, EXPERT_FFN = 2, 32


def hf_gemma4(d: Gemma4Dims = E2B_LIKE, seed: int = 0) -> transformers.Gemma4ForCausalLM:
    """transformers' f32 model, every weight random (norms and layer scalars near 1, q/k norms near head_dim^-1/4,
    matrices ~unit-variance outputs)."""
    extra = {"num_global_key_value_heads": d.global_kv_heads} if d.global_kv_heads else {}
    if d.experts:
        extra.update(enable_moe_block=True, num_experts=d.experts, top_k_experts=EXPERTS_USED,
                     moe_intermediate_size=EXPERT_FFN)
    cfg = transformers.Gemma4TextConfig(
        vocab_size=d.vocab, hidden_size=d.hidden, intermediate_size=d.ffn, num_hidden_layers=d.layers,
        num_attention_heads=d.heads, num_key_value_heads=d.kv_heads, head_dim=d.head_dim,
        global_head_dim=d.global_head_dim, layer_types=list(d.layer_types), sliding_window=d.window,
        final_logit_softcapping=d.softcap, vocab_size_per_layer_input=d.vocab, hidden_size_per_layer_input=d.per_layer,
        num_kv_shared_layers=d.kv_shared, use_double_wide_mlp=d.double_wide, attention_k_eq_v=d.k_eq_v,
        max_position_embeddings=d.context, rms_norm_eps=d.rms_eps, **extra)
    cfg._attn_implementation = "eager"
    model = transformers.Gemma4ForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("q_norm.weight", "k_norm.weight")):  # q.k of O(1): attention scale 1 with unit-RMS
                # heads would put scores at O(head_dim), softmaxes so peaked that bf16 rounding flips them
                p.copy_((1 + 0.2 * torch.randn(p.shape, generator=g)) * p.shape[-1] ** -0.25)
            elif "norm" in name or name.endswith(("router.scale", "per_expert_scale")):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("router.proj.weight"):  # decisive routing: no near-tie in a token's top k
                p.copy_(4 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
        for layer in model.model.layers:
            layer.layer_scalar.copy_(0.5 + torch.rand(1, generator=g))
    return model


NEWLINES = ("\n", "\n\n")
"""Runs of newlines that are tokens (Gemma's vocabulary has them; llama.cpp takes such a run whole)."""


def _gemma4_vocab(vocab: int, specials: tuple[str, ...] = ()):
    """_spm_vocab's pieces, NEWLINES and `specials` (control tokens), with the merges that build the pieces (Gemma 4's
    tokenizer.json is a BPE)."""
    n = vocab - len(NEWLINES) - len(specials)
    tokens, types, scores, _, ids = _spm_vocab(n)
    base = ["▁", *sorted(set(WORDS.replace(" ", "")))]
    _, merges = _grow(["▁" + wd for wd in WORDS.split()], set(base), n - 4 - 256 - len(base))
    return (tokens + list(NEWLINES) + list(specials),
            types + [int(gguf.TokenType.NORMAL)] * len(NEWLINES) + [int(gguf.TokenType.CONTROL)] * len(specials),
            scores + [-1000.0] * (len(NEWLINES) + len(specials)), merges, ids)


def _write_metadata(w: gguf.GGUFWriter, d: Gemma4Dims) -> None:
    swa = [t == "sliding_attention" for t in d.layer_types]
    first_shared = d.layers - d.kv_shared
    w.add_block_count(d.layers)
    w.add_context_length(d.context)
    w.add_embedding_length(d.hidden)
    w.add_feed_forward_length([d.ffn if i < first_shared else 2 * d.ffn for i in range(d.layers)]
                              if d.double_wide else d.ffn)
    w.add_head_count(d.heads)
    w.add_head_count_kv([d.kv_heads if s else d.global_kv_heads for s in swa] if d.global_kv_heads else d.kv_heads)
    w.add_rope_freq_base(1_000_000.0)
    w.add_rope_freq_base_swa(10_000.0)
    w.add_layer_norm_rms_eps(d.rms_eps)
    w.add_key_length(d.global_head_dim)
    w.add_value_length(d.global_head_dim)
    w.add_key_length_swa(d.head_dim)
    w.add_value_length_swa(d.head_dim)
    w.add_final_logit_softcapping(d.softcap)
    w.add_sliding_window(d.window)
    w.add_shared_kv_layers(d.kv_shared)
    w.add_embedding_length_per_layer_input(d.per_layer)
    w.add_sliding_window_pattern(swa)
    w.add_rope_dimension_count(d.global_head_dim)  # "proportional": rope_freqs.weight stops the other pairs
    w.add_rope_dimension_count_swa(d.head_dim)
    if d.experts:
        w.add_expert_count(d.experts)
        w.add_expert_used_count(EXPERTS_USED)
        w.add_expert_feed_forward_length(EXPERT_FFN)
    w.add_file_type(0)


def _write_tokenizer(w: gguf.GGUFWriter, d: Gemma4Dims) -> None:
    tokens, types, scores, merges, ids = _gemma4_vocab(d.vocab, d.specials)
    w.add_tokenizer_model("gemma4")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(ids["bos"])
    w.add_eos_token_id(ids["eos"])
    w.add_unk_token_id(ids["unk"])
    w.add_pad_token_id(ids["pad"])
    w.add_add_space_prefix(False)
    w.add_add_bos_token(True)


def write_gemma4_gguf(path, model: transformers.Gemma4ForCausalLM, d: Gemma4Dims = E2B_LIKE,
                      qtype: str = "F32", chat_template: str = "") -> Path:
    w = gguf.GGUFWriter(str(path), "gemma4")
    w.add_name("tiny-gemma4")
    _write_metadata(w, d)
    _write_tokenizer(w, d)
    if chat_template:
        w.add_chat_template(chat_template)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GEMMA4, d.layers)
    rot = int(d.global_head_dim * 0.25 / 2)  # the proportional rope's turning pairs (partial_rotary_factor 0.25)
    w.add_tensor("rope_freqs.weight", np.array([1.0] * rot + [1e30] * (d.global_head_dim // 2 - rot), np.float32))
    for name, value in model.state_dict().items():
        if name == "lm_head.weight":
            continue  # tied
        base = name.removesuffix(".weight")
        gguf_name = names.get_name(base)
        if name.endswith(("router.scale", "per_expert_scale")):  # Gemma4Model.modify_tensors' own names
            gguf_name = base.replace("model.layers.", "blk.").replace("router.scale", "ffn_gate_inp.scale")
            gguf_name = gguf_name.replace("router.per_expert_scale", "ffn_down_exps.scale")
        assert gguf_name is not None, name
        kind = qtype if value.dim() >= 2 and "ffn_gate_inp" not in gguf_name else "F32"
        if kind == "Q8_0" and value.shape[-1] % 32:  # rows no block fits: the converter falls back to F16
            kind = "F16"
        suffix = "" if gguf_name.endswith(".scale") else ".weight"
        _add_tensor(w, gguf_name + suffix, value.detach().float().numpy(), MATRIX_TYPES[kind])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)
