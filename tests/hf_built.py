"""transformers' model of a tiny GGUF (tests/gguf_factory.py) whose architecture its GGUF loader does not read
(granite, granitemoe, smollm3, olmo2, olmo3, mistral3), or reads slowly (qwen3: a reranker's, built in 0.1 s, not 13): the config
from the file's dims, the weights from the file (gguf-py's dequantize), q/k rows un-permuted where llama.cpp's
converter permuted them for its rope. A reranker's cls.output (the head's label rows) is not read: transformers
scores with the whole head."""

from __future__ import annotations

import numpy as np
import torch
import transformers
from gguf.quants import dequantize

from tests.gguf_factory import LAYOUTS, TinyDims


def _granite(d: TinyDims) -> dict:
    return dict(embedding_multiplier=d.embedding_scale or 1.0, residual_multiplier=d.residual_scale or 1.0,
                attention_multiplier=d.attention_scale or d.head_dim ** -0.5, logits_scaling=d.logit_scale or 1.0)


def _experts(d: TinyDims) -> dict:
    return dict(num_local_experts=d.experts, num_experts_per_tok=d.experts_used, intermediate_size=d.expert_ffn)


def _olmo3(d: TinyDims) -> dict:
    """Its window; rope per layer type: the sliding layers' default, the full ones' the file's YaRN if any."""
    default = {"rope_type": "default", "rope_theta": d.rope_theta}
    full = default
    if d.yarn_original_context:
        fast, slow = d.yarn_betas or (32.0, 1.0)
        full = {"rope_type": "yarn", "rope_theta": d.rope_theta, "factor": d.context / d.yarn_original_context,
                "original_max_position_embeddings": d.yarn_original_context, "beta_fast": fast, "beta_slow": slow}
    return dict(sliding_window=d.sliding_window, rope_parameters={"sliding_attention": default, "full_attention": full})


def _ministral3(d: TinyDims) -> dict:
    """Its YaRN (the file's factor, betas, mscale_all_dim) and Llama 4 temperature beta over the original context."""
    fast, slow = d.yarn_betas or (32.0, 1.0)
    return dict(rope_parameters={"rope_type": "yarn", "rope_theta": d.rope_theta, "factor": d.context / d.yarn_original_context,
                                 "original_max_position_embeddings": d.yarn_original_context, "beta_fast": fast,
                                 "beta_slow": slow, "mscale": 1.0, "mscale_all_dim": d.yarn_log_mul,
                                 "llama_4_scaling_beta": d.attn_temperature})


MODELS = {  # arch -> (config class, model class, config fields beyond the common ones)
    "granite": (transformers.GraniteConfig, transformers.GraniteForCausalLM, _granite),
    "granitemoe": (transformers.GraniteMoeConfig, transformers.GraniteMoeForCausalLM, lambda d: _granite(d) | _experts(d)),
    "smollm3": (transformers.SmolLM3Config, transformers.SmolLM3ForCausalLM, lambda d: {}),
    "olmo2": (transformers.Olmo2Config, transformers.Olmo2ForCausalLM, lambda d: {}),
    "olmo3": (transformers.Olmo3Config, transformers.Olmo3ForCausalLM, _olmo3),
    "mistral3": (transformers.Ministral3Config, transformers.Ministral3ForCausalLM, _ministral3),
}

FAST = {"qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM, lambda d: {})}
"""Architectures its GGUF loader reads too (the logits tests load them through it), built here where a test
wants the reference quick (a qwen3 reranker's: ~13 s through the loader)."""

NAMES = {  # llama.cpp's name of a block's tensor -> transformers'
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "post_attention_norm": "post_attention_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
    "ffn_gate_inp": "block_sparse_moe.router", "ffn_down_exps": "block_sparse_moe.experts.down_proj",
}


def _unpermute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """The inverse of gguf_factory._permute: each head's rows back from (pair, half) to (half, pair) order."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def hf_model(path, arch: str, d: TinyDims) -> torch.nn.Module:
    """transformers' f32 model (eager attention) with the weights of the GGUF at `path`."""
    from hearth.loader.gguf_loader import GGUFFile

    g = GGUFFile(path)
    t = {n: torch.from_numpy(dequantize(np.asarray(x.data), x.qtype).astype(np.float32).reshape(x.shape))
         for n, x in g.tensors.items() if not n.startswith("cls.")}
    config_cls, model_cls, extra = (MODELS | FAST)[arch]
    fields = dict(vocab_size=d.vocab, hidden_size=d.hidden, intermediate_size=d.ffn, num_hidden_layers=d.layers,
                  num_attention_heads=d.heads, num_key_value_heads=d.kv_heads, head_dim=d.head_dim,
                  rms_norm_eps=d.rms_eps, max_position_embeddings=d.context, tie_word_embeddings=d.tied, pad_token_id=None,
                  rope_parameters={"rope_type": "default", "rope_theta": d.rope_theta})
    cfg = config_cls(**fields | extra(d))
    cfg._attn_implementation = "eager"
    model = model_cls(cfg).eval()
    state = {"model.embed_tokens.weight": t.pop("token_embd.weight"), "model.norm.weight": t.pop("output_norm.weight")}
    if "output.weight" in t:
        state["lm_head.weight"] = t.pop("output.weight")
    for name, w in t.items():
        _, i, base, _ = name.split(".")
        if LAYOUTS[arch].permute_qk and base in ("attn_q", "attn_k"):
            w = _unpermute(w, d.heads if base == "attn_q" else d.kv_heads)
        if base in ("ffn_gate_exps", "ffn_up_exps"):  # transformers' one [experts, gate | up, hidden]
            if base == "ffn_gate_exps":
                up = t[name.replace("ffn_gate_exps", "ffn_up_exps")]
                state[f"model.layers.{i}.block_sparse_moe.experts.gate_up_proj"] = torch.cat([w, up], dim=1)
            continue
        suffix = "" if base.endswith("_exps") else ".weight"
        state[f"model.layers.{i}.{NAMES[base]}{suffix}"] = w
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in k or k == "lm_head.weight" and d.tied for k in missing), (missing, unexpected)
    return model
