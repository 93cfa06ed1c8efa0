"""A tiny random LFM2 from transformers (Lfm2ForCausalLM), written as a GGUF the way llama.cpp's converter writes
it (conversion/lfm2.py): the per-layer `lfm2.attention.head_count_kv` with 0 on the conv layers,
`lfm2.shortconv.l_cache`, the conv weight [hidden, 1, L] squeezed to [hidden, L], the final norm as
token_embd_norm, q/k not permuted (neox rope)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import torch
import transformers

from tests.gguf_factory import TinyDims, _add_tensor, _write_tokenizer, MATRIX_TYPES

LAYER_TYPES = ("conv", "conv", "full_attention", "conv", "full_attention", "conv")
DIMS = TinyDims(layers=len(LAYER_TYPES), hidden=64, heads=4, kv_heads=1, head_dim=16, ffn=96, vocab=320, context=256,
                rms_eps=1e-5)

NAMES = {  # transformers' name of a layer's tensor -> llama.cpp's
    "operator_norm": "attn_norm", "ffn_norm": "ffn_norm", "feed_forward.w1": "ffn_gate", "feed_forward.w3": "ffn_up",
    "feed_forward.w2": "ffn_down", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.out_proj": "attn_output", "self_attn.q_layernorm": "attn_q_norm",
    "self_attn.k_layernorm": "attn_k_norm", "conv.in_proj": "shortconv.in_proj", "conv.out_proj": "shortconv.out_proj",
    "conv.conv": "shortconv.conv",
}


def hf_lfm2(seed: int = 0, d: TinyDims = DIMS, blocks: float = 1.0) -> transformers.Lfm2ForCausalLM:
    """transformers' f32 model, every weight random (norms near 1, matrices ~unit-variance outputs); blocks: a
    factor on what each block adds to the residual stream (small: the next token leans on the last ones, so
    greedy text soon repeats itself, as n-gram drafting wants)."""
    cfg = transformers.Lfm2Config(vocab_size=d.vocab, hidden_size=d.hidden, intermediate_size=d.ffn,
                                  num_hidden_layers=d.layers, num_attention_heads=d.heads,
                                  num_key_value_heads=d.kv_heads,
                                  max_position_embeddings=d.context, norm_eps=d.rms_eps, block_auto_adjust_ff_dim=False,
                                  layer_types=list(LAYER_TYPES), conv_L_cache=3, tie_word_embeddings=True,
                                  rope_parameters={"rope_type": "default", "rope_theta": d.rope_theta})
    cfg._attn_implementation = "eager"
    model = transformers.Lfm2ForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            elif "conv.conv" in name:  # [hidden, 1, L]
                p.copy_(0.6 * torch.randn(p.shape, generator=g))
            else:
                out = name.endswith(("out_proj.weight", "w2.weight"))
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5 * (blocks if out else 1.0))
    return model


def write_lfm2_gguf(path, model: transformers.Lfm2ForCausalLM, qtype: str = "F32", d: TinyDims = DIMS) -> Path:
    w = gguf.GGUFWriter(str(path), "lfm2")
    w.add_name("tiny-lfm2")
    w.add_context_length(d.context)
    w.add_embedding_length(d.hidden)
    w.add_block_count(d.layers)
    w.add_feed_forward_length(d.ffn)
    w.add_head_count(d.heads)
    w.add_head_count_kv([d.kv_heads if t != "conv" else 0 for t in LAYER_TYPES])
    w.add_rope_freq_base(d.rope_theta)
    w.add_layer_norm_rms_eps(d.rms_eps)
    w.add_vocab_size(d.vocab)
    w.add_shortconv_l_cache(3)
    w.add_file_type(0)
    _write_tokenizer(w, d)
    state = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    _add_tensor(w, "token_embd.weight", state.pop("model.embed_tokens.weight"), MATRIX_TYPES[qtype])
    _add_tensor(w, "token_embd_norm.weight", state.pop("model.embedding_norm.weight"), MATRIX_TYPES[qtype])
    for name, value in state.items():
        if not name.startswith("model.layers."):
            continue  # lm_head: tied
        _, _, i, rest = name.split(".", 3)
        base = rest.removesuffix(".weight")
        kind = qtype
        if base == "conv.conv":  # [hidden, L], as the converter writes it, kept F32 (rows of 3 fit no block)
            value, kind = value.squeeze(1), "F32"
        _add_tensor(w, f"blk.{i}.{NAMES[base]}.weight", value, MATRIX_TYPES[kind])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)
