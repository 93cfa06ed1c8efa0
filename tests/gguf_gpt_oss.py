"""Tiny random gpt-oss GGUF files, with the keys and tensor names llama.cpp's converter writes (GptOssModel):
q/k/v/o with biases, attn_sinks.weight, the norm before the experts as post_attention_norm, a biased router,
stacked experts ffn_{gate,up,down}_exps in MXFP4 with F32 biases, YaRN rope, a sliding window."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

from tests.gguf_factory import TinyDims, _write_tokenizer


@dataclass(frozen=True, slots=True)
class GptOssDims:
    layers: int = 4  # sliding, full, sliding, full
    hidden: int = 64
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 32  # the quantized KV caches' blocks are 32 wide
    experts: int = 4
    experts_used: int = 2
    expert_ffn: int = 64  # MXFP4 rows are whole 32-weight blocks
    vocab: int = 320
    context: int = 64
    yarn_original_context: int = 16  # YaRN 4x
    yarn_betas: tuple[float, float] = (0.5, 0.05)  # a ramp over pairs ~2.18 .. 5.28 of 16: rounding it shows
    rope_theta: float = 150000.0
    sliding_window: int = 8
    rms_eps: float = 1e-5
    expert_gain: float = 4.0
    """Expert gate/up pre-activations ~N(0, gain^2): past SwiGLU's clamp at 7 for ~8% of them."""


def write_tiny_gpt_oss(path, *, seed: int = 0, chat_template: str | None = None, **dims) -> GptOssDims:
    d = GptOssDims(**dims)
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "gpt-oss")
    w.add_name("tiny-gpt-oss")
    w.add_context_length(d.context)
    w.add_embedding_length(d.hidden)
    w.add_block_count(d.layers)
    w.add_feed_forward_length(d.expert_ffn)
    w.add_head_count(d.heads)
    w.add_head_count_kv(d.kv_heads)
    w.add_key_length(d.head_dim)
    w.add_value_length(d.head_dim)
    w.add_layer_norm_rms_eps(d.rms_eps)
    w.add_rope_freq_base(d.rope_theta)
    w.add_sliding_window(d.sliding_window)
    w.add_expert_count(d.experts)
    w.add_expert_used_count(d.experts_used)
    w.add_expert_feed_forward_length(d.expert_ffn)
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(d.context / d.yarn_original_context)
    w.add_rope_scaling_orig_ctx_len(d.yarn_original_context)
    w.add_rope_scaling_yarn_beta_fast(d.yarn_betas[0])
    w.add_rope_scaling_yarn_beta_slow(d.yarn_betas[1])
    _write_tokenizer(w, TinyDims(vocab=d.vocab))
    if chat_template is not None:
        w.add_chat_template(chat_template)
    for name, value in _tensors(rng, d):
        if name.endswith("_exps.weight"):  # experts in MXFP4, the rest F32 (tight comparisons)
            w.add_tensor(name, gguf.quants.quantize(value, Q.MXFP4), raw_dtype=Q.MXFP4)
        else:
            w.add_tensor(name, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return d


def _tensors(rng: np.random.Generator, d: GptOssDims):
    def matrix(rows, cols, gain=1.0):
        return (gain * rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    def vec(n, std=0.5, mean=0.0):
        return rng.normal(mean, std, n).astype(np.float32)

    q_rows, kv_rows, e = d.heads * d.head_dim, d.kv_heads * d.head_dim, d.experts
    yield "token_embd.weight", rng.standard_normal((d.vocab, d.hidden)).astype(np.float32)
    for i in range(d.layers):
        p = f"blk.{i}."
        yield p + "attn_norm.weight", vec(d.hidden, 0.1, 1.0)
        for name, rows in (("attn_q", q_rows), ("attn_k", kv_rows), ("attn_v", kv_rows)):
            yield p + name + ".weight", matrix(rows, d.hidden)
            yield p + name + ".bias", vec(rows)
        yield p + "attn_output.weight", matrix(d.hidden, q_rows)
        yield p + "attn_output.bias", vec(d.hidden)
        yield p + "attn_sinks.weight", vec(d.heads, 1.0, 1.0)
        yield p + "post_attention_norm.weight", vec(d.hidden, 0.1, 1.0)
        yield p + "ffn_gate_inp.weight", matrix(e, d.hidden, 2.0)
        yield p + "ffn_gate_inp.bias", vec(e)
        for name, rows, cols, gain in (("gate", d.expert_ffn, d.hidden, d.expert_gain),
                                       ("up", d.expert_ffn, d.hidden, d.expert_gain),
                                       ("down", d.hidden, d.expert_ffn, 1.0 / d.expert_gain)):
            yield p + f"ffn_{name}_exps.weight", np.stack([matrix(rows, cols, gain) for _ in range(e)])
            yield p + f"ffn_{name}_exps.bias", np.stack([vec(rows) for _ in range(e)])
    yield "output_norm.weight", vec(d.hidden, 0.1, 1.0)
    yield "output.weight", matrix(d.vocab, d.hidden)


def tiny_gpt_oss_file(tmp: Path, **kw) -> tuple[Path, GptOssDims]:
    path = Path(tmp) / "tiny-gpt-oss.gguf"
    return path, write_tiny_gpt_oss(path, **kw)
