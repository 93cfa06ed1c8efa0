"""Tiny random-weight GGUF files, written the way llama.cpp's converter writes real ones.

write_tiny_gguf(path, arch) gives a 2-4 layer model with the metadata keys and tensor names llama.cpp
uses for `arch`, plus a small but valid tokenizer section, so the same file loads in hearth, in
transformers (`from_pretrained(dir, gguf_file=name)`) and in llama.cpp.

Weights are drawn in Hugging Face layout and then transformed as convert_hf_to_gguf.py does:
llama q/k rows are permuted for llama.cpp's adjacent-pair rope, gemma norms are stored as (w + 1).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

from tests.iq4_quantize import QUANTIZERS


@dataclass(frozen=True, slots=True)
class TinyDims:
    layers: int = 2
    hidden: int = 64
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    ffn: int = 128
    vocab: int = 320
    context: int = 256
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6
    tied: bool = True
    sliding_window: int = 0
    rope_scaling: float = 0.0
    """gemma3: linear rope scaling factor of the global layers (0 = none)."""
    attn_softcap: float = 0.0
    final_softcap: float = 0.0
    """gemma2: tanh soft-capping of the attention scores and of the logits (0 = none)."""
    longrope_original_context: int = 0
    """phi3: LongRoPE (longrope_factors) for a model trained at this context and stretched to `context`."""
    rope_dim: int = 0
    """Rotated dims of a head (0: all; phi3 writes it, Phi-4-mini rotates 3/4)."""
    yarn_original_context: int = 0
    """A YaRN-scaled file (rope.scaling.type yarn, factor context / this, trained at this context)."""
    yarn_betas: tuple[float, float] | None = None
    """(rope.scaling.yarn_beta_fast, yarn_beta_slow) written too (None: the keys are absent, llama.cpp's 32, 1)."""
    yarn_type: str = "yarn"
    """The rope.scaling.type a yarn_original_context file names (another: a type hearth does not know)."""
    tokenizer: str = "gpt2"
    """gpt2 (byte-level BPE) or llama (sentencepiece)."""
    fim: bool = False
    """gpt2 only: Qwen2.5-Coder's six fill-in-the-middle tokens, as control tokens before BOS/EOS
    (found by their text, as in Qwen's GGUFs, which name them by no key)."""
    vl_tokens: bool = False
    """gpt2 only: Qwen2-VL's chat and vision tokens (QWEN_VL_TOKENS), as control tokens before BOS/EOS."""
    llama3_rope: tuple[float, float, float, int] | None = None
    """Llama 3.1's rope scaling (factor, low_freq_factor, high_freq_factor, original context): written as
    llama.cpp's converter writes it, one factor per rotated pair in `rope_freqs.weight`."""
    pooling_type: int | None = None
    """`{arch}.pooling_type` (llama.cpp's LLAMA_POOLING_TYPE; None: the key is absent, as in a chat model's)."""
    rank_rows: tuple[int, ...] = ()
    """A decoder reranker's `cls.output.weight`: these rows of the output head, as llama.cpp's converter takes
    Qwen3-Reranker's "yes" and "no" rows, and `{arch}.classifier.output_labels` naming them (RANK_LABELS)."""
    experts: int = 0
    experts_used: int = 0
    expert_ffn: int = 0
    """MoE (qwen3moe, or a llama file as Mixtral's): routed experts per layer, how many each token runs, each
    one's SwiGLU width."""
    embedding_scale: float = 0.0
    residual_scale: float = 0.0
    attention_scale: float = 0.0
    logit_scale: float = 0.0
    """granite's `{arch}.embedding_scale`, `.residual_scale`, `.attention.scale`, `.logit_scale` (0: the key is absent)."""
    attn_temperature: float = 0.0
    """mistral3's `{arch}.attention.temperature_scale` (Llama 4-style beta; 0: the key is absent), its floor scale the
    yarn_original_context."""
    yarn_log_mul: float = 0.0
    """`rope.scaling.yarn_log_multiplier` (transformers' mscale_all_dim, as Ministral 3's converter writes it; 0: absent)."""
    rope_sections: tuple[int, ...] = ()
    """qwen2vl's `{arch}.rope.dimension_sections` (M-RoPE: rotated pairs per t, h, w, and a 4th; (): absent)."""
    deepstack: int = 0
    """qwen3vl's `{arch}.n_deepstack_layers` (0: the key is absent)."""


SPECULATES = {"heads": 2, "kv_heads": 1, "head_dim": 32}
"""llama / qwen2 dims (hidden 64 as 2 heads of 32) whose attention the native kernels take, so a Q8_0 file
speculates: the default head_dim 16 runs torch's attention, whose verify rows are not decode rows (speculation off)."""


@dataclass(frozen=True, slots=True)
class ArchLayout:
    """What the converter writes for an architecture beyond the llama basics."""

    permute_qk: bool = False
    qkv_bias: bool = False
    qk_norm: bool = False
    sandwich_norm: bool = False
    norm_shift: float = 0.0
    write_key_length: bool = False
    write_rope_dim: bool = False
    write_vocab_size: bool = False
    fused_qkv: bool = False
    """q, k, v as one attn_qkv matrix (phi3)."""
    fused_gate_up: bool = False
    """gate and up as one ffn_up matrix, rows [gate | up] (phi3)."""
    moe: bool = False
    """Router and stacked experts (ffn_gate_inp, ffn_{gate,up,down}_exps) in place of the dense MLP."""
    pre_norm: bool = True
    """attn_norm and ffn_norm (olmo2 has only the sandwich norms after attention and the MLP)."""
    qk_norm_whole: bool = False
    """attn_q_norm / attn_k_norm over the whole projection, [heads * head_dim] (olmo2), not [head_dim]."""
    file_arch: str = ""
    """general.architecture where it is not the tiny model's name (olmo3: an olmo2 file)."""
    swa_every: int = 0
    """With a sliding window: attention.sliding_window_pattern as the per-layer bools the converter writes, every
    swa_every-th layer full (OLMo 3's layer_types)."""


LAYOUTS = {
    "llama": ArchLayout(permute_qk=True, write_rope_dim=True, write_vocab_size=True),
    "phi3": ArchLayout(write_rope_dim=True, fused_qkv=True, fused_gate_up=True),
    "qwen2": ArchLayout(qkv_bias=True),
    "qwen2vl": ArchLayout(qkv_bias=True),  # Qwen2-VL's and Qwen2.5-VL's text model: qwen2's tensors
    "qwen3": ArchLayout(qk_norm=True, write_key_length=True),
    "qwen3vl": ArchLayout(qk_norm=True, write_key_length=True),  # Qwen3-VL's text model: qwen3's tensors
    "qwen3moe": ArchLayout(qk_norm=True, write_key_length=True, moe=True),
    "gemma2": ArchLayout(sandwich_norm=True, norm_shift=1.0, write_key_length=True),
    "granite": ArchLayout(permute_qk=True, write_rope_dim=True, write_vocab_size=True),
    "granitemoe": ArchLayout(permute_qk=True, write_rope_dim=True, write_vocab_size=True, moe=True),
    "smollm3": ArchLayout(permute_qk=True, write_rope_dim=True, write_vocab_size=True),
    "mistral3": ArchLayout(permute_qk=True, write_rope_dim=True, write_vocab_size=True),
    "olmo2": ArchLayout(qk_norm=True, qk_norm_whole=True, sandwich_norm=True, pre_norm=False),
    "olmo3": ArchLayout(qk_norm=True, qk_norm_whole=True, sandwich_norm=True, pre_norm=False, file_arch="olmo2",
                        swa_every=4),
    "gemma3": ArchLayout(qk_norm=True, sandwich_norm=True, norm_shift=1.0, write_key_length=True),
}

DEFAULT_DIMS = {
    "llama": TinyDims(rope_theta=100000.0, tied=False, rms_eps=1e-5),
    "phi3": TinyDims(tied=False, rms_eps=1e-5),
    "qwen2": TinyDims(rope_theta=1000000.0),
    # heads of 32 (the fused C++ layer's smallest), 16 pairs in sections as Qwen2-VL's 16 / 24 / 24 of 64 go; a
    # base of 100, not 1e6: the h and w sections are the slow pairs, which at 1e6 barely turn over an image's rows
    "qwen2vl": TinyDims(hidden=128, head_dim=32, rope_theta=100.0, rope_sections=(4, 6, 6, 0)),
    "qwen3": TinyDims(layers=3, head_dim=32, rope_theta=1000000.0),
    # 16 pairs interleaved as Qwen3-VL's 24 / 20 / 20 of 64 (h and w in every third pair up to 15), base 100 as
    # qwen2vl's; deepstack parts after layers 0 and 1 of 3 (Qwen3-VL's 3 of 28+)
    "qwen3vl": TinyDims(layers=3, hidden=128, head_dim=32, rope_theta=100.0, rope_sections=(6, 5, 5, 0), deepstack=2),
    # 4 experts, 2 per token: every routing choice (which two, their weights) shows in the logits
    "qwen3moe": TinyDims(layers=2, head_dim=32, rope_theta=1000000.0, experts=4, experts_used=2, expert_ffn=96),
    # sliding and global layers in turn; an attention cap small enough to bite on a tiny model's scores, Gemma 2's
    # logit cap (its logits reach ~75)
    "gemma2": TinyDims(layers=4, kv_heads=1, head_dim=32, sliding_window=8, tokenizer="llama",
                       attn_softcap=1.5, final_softcap=30.0),
    # scales away from 1 (and the attention's from 1/sqrt(32)) so that each shows in the logits; heads of 32 (the
    # fused C++ layer's smallest: the whole layer in one call), written as hidden / heads (llama's files)
    "granite": TinyDims(layers=3, hidden=128, head_dim=32, tied=False, rms_eps=1e-5, embedding_scale=0.5,
                        residual_scale=0.25, attention_scale=0.1, logit_scale=4.0),
    "granitemoe": TinyDims(layers=2, hidden=128, head_dim=32, rms_eps=1e-5, embedding_scale=0.5, residual_scale=0.25,
                           attention_scale=0.1, logit_scale=4.0, experts=4, experts_used=2, expert_ffn=96),
    # Ministral 3's YaRN (betas 32 and 1, mscale_all_dim 1) 8x over an original context of 8, so that the
    # tests' 24 positions take three temperature steps; beta 0.5 (the released models': 0.1) to show in 2 layers
    "mistral3": TinyDims(hidden=128, head_dim=32, tied=False, rms_eps=1e-5, rope_theta=1000000.0, context=64,
                         yarn_original_context=8, yarn_betas=(32.0, 1.0), yarn_log_mul=1.0, attn_temperature=0.5),
    # 8 layers: layers 3 and 7 without rope
    "smollm3": TinyDims(layers=8, hidden=128, head_dim=32, rope_theta=2000000.0, rms_eps=1e-6),
    "olmo2": TinyDims(layers=3, hidden=128, head_dim=32, tied=False, rope_theta=500000.0, rms_eps=1e-6),
    # 3 sliding layers then a full one; a window of 8 under the tests' 24-token prompts
    "olmo3": TinyDims(layers=4, hidden=128, head_dim=32, tied=False, rope_theta=500000.0, rms_eps=1e-6,
                      sliding_window=8),
    # 6 layers: five sliding ones then a global one, llama.cpp's gemma3 pattern
    "gemma3": TinyDims(layers=6, kv_heads=1, head_dim=32, rope_theta=1000000.0, sliding_window=8,
                       tokenizer="llama"),
}

RANK_LABELS = ("yes", "no", "maybe", "unsure")
"""The labels a rank_rows file names, in order (Qwen3-Reranker's are the first two)."""

MATRIX_TYPES = {"F32": Q.F32, "F16": Q.F16, "Q8_0": Q.Q8_0, "IQ4_NL": Q.IQ4_NL, "IQ4_XS": Q.IQ4_XS}


def write_tiny_gguf(path, arch: str, *, qtype: str = "F32", seed: int = 0, chat_template: str | None = None,
                    split_max_tensors: int = 0, adjust=None, rerank_template: str | None = None, **dims) -> TinyDims:
    """Write a random `arch` model to `path`; dims override DEFAULT_DIMS[arch]; chat_template: the
    tokenizer's template (default: none, as a base model's GGUF); adjust(name, f32 array) -> the array
    written (a LoRA merged into the weights); rerank_template: `tokenizer.chat_template.rerank` (a decoder
    reranker's prompt, as llama.cpp's converter writes Qwen3-Reranker's). Returns the dims."""
    d = replace(DEFAULT_DIMS[arch], **dims)
    layout = LAYOUTS[arch]
    rng = np.random.default_rng(seed)
    # split_max_tensors: several files as llama.cpp's --split-max-tensors writes them (stem-0000i-of-0000n.gguf)
    w = gguf.GGUFWriter(str(path), layout.file_arch or arch, split_max_tensors=split_max_tensors)
    _write_hparams(w, layout.file_arch or arch, d, layout)
    _write_tokenizer(w, d)
    if chat_template is not None:
        w.add_chat_template(chat_template)
    if rerank_template is not None:
        w.add_chat_template([{"name": "rerank", "template": rerank_template}])
    for name, value in _tensors(rng, d, layout):
        _add_tensor(w, name, value if adjust is None else adjust(name, value), MATRIX_TYPES[qtype])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return d


def _write_hparams(w: gguf.GGUFWriter, arch: str, d: TinyDims, layout: ArchLayout) -> None:
    w.add_name(f"tiny-{arch}")
    w.add_context_length(d.context)
    w.add_embedding_length(d.hidden)
    w.add_block_count(d.layers)
    w.add_feed_forward_length(d.ffn)
    w.add_head_count(d.heads)
    w.add_head_count_kv(d.kv_heads)
    w.add_layer_norm_rms_eps(d.rms_eps)
    if d.pooling_type is not None:
        w.add_pooling_type(gguf.PoolingType(d.pooling_type))
    if d.rank_rows:
        w.add_classifier_output_labels(list(RANK_LABELS[:len(d.rank_rows)]))
    w.add_rope_freq_base(d.rope_theta)
    if layout.write_key_length:
        w.add_key_length(d.head_dim)
        w.add_value_length(d.head_dim)
    if layout.write_rope_dim:
        w.add_rope_dimension_count(d.rope_dim or d.head_dim)
    if layout.write_vocab_size:
        w.add_vocab_size(d.vocab)
    if d.sliding_window:
        w.add_sliding_window(d.sliding_window)
        if layout.swa_every:
            w.add_sliding_window_pattern([(i + 1) % layout.swa_every != 0 for i in range(d.layers)])
    if d.rope_sections:
        w.add_rope_dimension_sections(list(d.rope_sections))
    if d.deepstack:
        w.add_num_deepstack_layers(d.deepstack)
    if layout.moe or d.experts:  # as convert_hf_to_gguf.py's Qwen2MoeModel; no expert_weights_norm (the graph implies it)
        w.add_expert_count(d.experts)
        w.add_expert_used_count(d.experts_used)
        w.add_expert_feed_forward_length(d.expert_ffn)
    if d.rope_scaling:
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(d.rope_scaling)
    if d.attn_softcap:
        w.add_attn_logit_softcapping(d.attn_softcap)
    if d.final_softcap:
        w.add_final_logit_softcapping(d.final_softcap)
    for value, add in ((d.embedding_scale, w.add_embedding_scale), (d.residual_scale, w.add_residual_scale),
                       (d.attention_scale, w.add_attention_scale), (d.logit_scale, w.add_logit_scale)):
        if value:
            add(value)
    if d.longrope_original_context:
        w.add_rope_scaling_orig_ctx_len(d.longrope_original_context)
        w.add_rope_scaling_attn_factors(longrope_attn_factor(d))
    if d.yarn_original_context:
        w.add_string(gguf.Keys.Rope.SCALING_TYPE.format(arch=arch), d.yarn_type)
        w.add_rope_scaling_factor(d.context / d.yarn_original_context)
        w.add_rope_scaling_orig_ctx_len(d.yarn_original_context)
        if d.yarn_betas:
            w.add_rope_scaling_yarn_beta_fast(d.yarn_betas[0])
            w.add_rope_scaling_yarn_beta_slow(d.yarn_betas[1])
        if d.yarn_log_mul:
            w.add_rope_scaling_yarn_log_mul(d.yarn_log_mul)
    if d.attn_temperature:
        w.add_attn_temperature_scale(d.attn_temperature)


def _tensors(rng: np.random.Generator, d: TinyDims, layout: ArchLayout):
    """(gguf name, f32 array in torch order [out, in]) for every tensor of the model."""

    def matrix(rows, cols):  # ~unit-variance outputs for unit-variance inputs
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    def norm(n):  # HF stores gemma's norm as w with (1 + w) applied; the converter adds the 1
        return (rng.normal(0.0 if layout.norm_shift else 1.0, 0.1, n) + layout.norm_shift).astype(np.float32)

    q_rows, kv_rows = d.heads * d.head_dim, d.kv_heads * d.head_dim
    embd = rng.standard_normal((d.vocab, d.hidden)).astype(np.float32)
    yield "token_embd.weight", embd
    for i in range(d.layers):
        p = f"blk.{i}."
        q, k = matrix(q_rows, d.hidden), matrix(kv_rows, d.hidden)
        if layout.permute_qk:
            q, k = _permute(q, d.heads), _permute(k, d.kv_heads)
        v = matrix(kv_rows, d.hidden)
        if layout.fused_qkv:
            yield p + "attn_qkv.weight", np.concatenate([q, k, v])
        else:
            yield p + "attn_q.weight", q
            yield p + "attn_k.weight", k
            yield p + "attn_v.weight", v
        yield p + "attn_output.weight", matrix(d.hidden, q_rows)
        if layout.qkv_bias:
            for name, n in (("attn_q", q_rows), ("attn_k", kv_rows), ("attn_v", kv_rows)):
                yield p + name + ".bias", (0.5 * rng.standard_normal(n)).astype(np.float32)
        if layout.qk_norm:
            yield p + "attn_q_norm.weight", norm(q_rows if layout.qk_norm_whole else d.head_dim)
            yield p + "attn_k_norm.weight", norm(kv_rows if layout.qk_norm_whole else d.head_dim)
        if layout.pre_norm:
            yield p + "attn_norm.weight", norm(d.hidden)
            yield p + "ffn_norm.weight", norm(d.hidden)
        if layout.sandwich_norm:
            yield p + "post_attention_norm.weight", norm(d.hidden)
            yield p + "post_ffw_norm.weight", norm(d.hidden)
        if layout.moe or d.experts:  # the router [experts, hidden]; each expert's matrices stacked [experts, out, in]
            yield p + "ffn_gate_inp.weight", matrix(d.experts, d.hidden)
            for name, rows, cols in (("gate", d.expert_ffn, d.hidden), ("up", d.expert_ffn, d.hidden),
                                     ("down", d.hidden, d.expert_ffn)):
                yield p + f"ffn_{name}_exps.weight", np.stack([matrix(rows, cols) for _ in range(d.experts)])
            continue
        gate, up = matrix(d.ffn, d.hidden), matrix(d.ffn, d.hidden)
        if layout.fused_gate_up:
            yield p + "ffn_up.weight", np.concatenate([gate, up])
        else:
            yield p + "ffn_gate.weight", gate
            yield p + "ffn_up.weight", up
        yield p + "ffn_down.weight", matrix(d.hidden, d.ffn)
    if d.llama3_rope:
        yield "rope_freqs.weight", llama3_rope_factors(d)
    if d.longrope_original_context:
        short, long = longrope_factors(d)
        yield "rope_factors_short.weight", short
        yield "rope_factors_long.weight", long
    yield "output_norm.weight", norm(d.hidden)
    head = embd if d.tied else matrix(d.vocab, d.hidden)
    if not d.tied:
        yield "output.weight", head
    if d.rank_rows:
        yield "cls.output.weight", head[list(d.rank_rows)]


def llama3_rope_factors(d: TinyDims) -> np.ndarray:
    """[head_dim / 2] f32: convert_hf_to_gguf.py's factors for rope_type llama3 (a pair whose wavelength is
    past the original context turns `factor` times slower, one under context / high_freq_factor keeps its
    speed, and those between blend the two), written from the formula in Meta's and HF's code."""
    factor, low, high, context = d.llama3_rope
    freqs = 1.0 / d.rope_theta ** (np.arange(0, d.head_dim, 2, dtype=np.float64) / d.head_dim)
    wavelen = 2 * np.pi / freqs
    smooth = (context / wavelen - low) / (high - low)
    out = np.where(wavelen < context / high, 1.0,
                   np.where(wavelen > context / low, factor, 1.0 / ((1 - smooth) / factor + smooth)))
    return out.astype(np.float32)


def longrope_factors(d: TinyDims) -> tuple[np.ndarray, np.ndarray]:
    """[rot / 2] f32 each: a LongRoPE model's short and long factors (made up, growing with the pair's
    wavelength as Phi-3's do; the long ones larger)."""
    pairs = (d.rope_dim or d.head_dim) // 2
    short = 1.0 + 0.25 * np.arange(pairs) / pairs
    return short.astype(np.float32), (short * np.linspace(1.0, 6.0, pairs)).astype(np.float32)


def longrope_attn_factor(d: TinyDims) -> float:
    """sqrt(1 + ln(scale) / ln(original)), scale = context / original: what Phi-3's converter writes as
    rope.scaling.attn_factor and transformers computes."""
    return float(np.sqrt(1 + np.log(d.context / d.longrope_original_context) / np.log(d.longrope_original_context)))


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute: each head's rows go from (half, pair) order to
    (pair, half), so rotating adjacent pairs in llama.cpp equals HF's rotate-half."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _add_tensor(w: gguf.GGUFWriter, name: str, value: np.ndarray, matrix_type: Q) -> None:
    """Matrices in `matrix_type`; norms, biases (1-D) and MoE routers stay F32 as llama.cpp keeps them."""
    if value.ndim == 1 or matrix_type == Q.F32 or name.endswith("ffn_gate_inp.weight"):
        w.add_tensor(name, value)
    elif matrix_type == Q.F16:
        w.add_tensor(name, value.astype(np.float16))
    else:
        encode = QUANTIZERS.get(matrix_type, lambda v: gguf.quants.quantize(v, matrix_type))
        w.add_tensor(name, encode(value), raw_dtype=matrix_type)


# ---- tokenizer section -------------------------------------------------------------------------

WORDS = ("the capital of france is paris hello world and to in that it was for on are with as his "
         "they be at one have this from or had by word but what some we can out other were all there "
         "when up use your how said an each she which do their time if will way about many then them")


def _write_tokenizer(w: gguf.GGUFWriter, d: TinyDims) -> None:
    if d.fim and d.tokenizer != "gpt2":
        raise ValueError("fim tokens are written for the gpt2 tokenizer only")
    if d.vl_tokens and d.tokenizer != "gpt2":
        raise ValueError("vl tokens are written for the gpt2 tokenizer only")
    built = _gpt2_vocab(d.vocab, d.fim, d.vl_tokens) if d.tokenizer == "gpt2" else _spm_vocab(d.vocab)
    tokens, types, scores, merges, special = built
    w.add_tokenizer_model(d.tokenizer)
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    if scores is not None:
        w.add_token_scores(scores)
    if merges is not None:
        w.add_token_merges(merges)
    w.add_bos_token_id(special["bos"])
    w.add_eos_token_id(special["eos"])
    if "unk" in special:
        w.add_unk_token_id(special["unk"])
    w.add_pad_token_id(special["pad"])
    w.add_add_bos_token(d.tokenizer == "llama")
    w.add_add_space_prefix(False)


def _byte_chars() -> list[str]:
    """GPT-2's printable stand-in for each byte value (byte-level BPE alphabet)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def _grow(words: list[str], base: set[str], budget: int) -> tuple[list[str], list[str]]:
    """Left-to-right merges of each word's symbols until `budget` new tokens exist."""
    new, merges, seen = [], [], set(base)
    for word in words:
        cur = word[0]
        for ch in word[1:]:
            if len(new) == budget:
                return new, merges
            merged = cur + ch
            if merged not in seen:
                seen.add(merged)
                new.append(merged)
                merges.append(f"{cur} {ch}")
            cur = merged
    return new, merges


FIM_TOKENS = ("<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>")
"""Qwen2.5-Coder's, in its vocabulary's order: ids vocab-8 .. vocab-3 of a `fim` tiny model."""


QWEN_VL_TOKENS = ("<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
                  "<|video_pad|>")
"""Qwen2-VL's chat turns and an image's (or video's) frame and places, in a `vl_tokens` tiny model."""


def _gpt2_vocab(vocab: int, fim: bool = False, vl: bool = False):
    byte_tokens = _byte_chars()
    space = byte_tokens[ord(" ")]
    words = [space + wd for wd in WORDS.split()]
    specials = [*(FIM_TOKENS if fim else ()), *(QWEN_VL_TOKENS if vl else ()), "<|begin_of_text|>", "<|end_of_text|>"]
    new, merges = _grow(words, set(byte_tokens), vocab - 256 - len(specials))
    tokens = byte_tokens + new
    tokens += [f"<|reserved_{i}|>" for i in range(vocab - len(specials) - len(tokens))] + specials
    types = [gguf.TokenType.NORMAL] * (vocab - len(specials)) + [gguf.TokenType.CONTROL] * len(specials)
    ids = {"bos": vocab - 2, "eos": vocab - 1, "pad": vocab - 1}
    return tokens, [int(t) for t in types], None, merges, ids


def _spm_vocab(vocab: int):
    # gemma's layout: <pad> <eos> <bos> <unk>, then byte fallback pieces, then scored pieces
    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    byte_pieces = [f"<0x{b:02X}>" for b in range(256)]
    base = ["▁", *sorted(set(WORDS.replace(" ", "")))]
    words = ["▁" + wd for wd in WORDS.split()]
    budget = vocab - len(specials) - len(byte_pieces) - len(base)
    new, _ = _grow(words, set(base), budget)
    pieces = base + new
    pieces += [f"<unused{i}>" for i in range(budget - len(new))]
    tokens = specials + byte_pieces + pieces
    types = ([gguf.TokenType.CONTROL] * 3 + [gguf.TokenType.UNKNOWN] + [gguf.TokenType.BYTE] * 256
             + [gguf.TokenType.NORMAL] * len(pieces))
    scores = [0.0] * (len(specials) + 256) + [-float(i) for i in range(len(pieces))]
    ids = {"pad": 0, "eos": 1, "bos": 2, "unk": 3}
    return tokens, [int(t) for t in types], scores, None, ids


def tiny_dir(tmp: Path, arch: str, **kw) -> tuple[Path, str, TinyDims]:
    """Write `arch` into directory `tmp` -> (dir, file name, dims), the pair transformers wants."""
    name = f"tiny-{arch}.gguf"
    dims = write_tiny_gguf(Path(tmp) / name, arch, **kw)
    return Path(tmp), name, dims


def write_header_only_gguf(path, arch: str) -> None:
    """A valid GGUF with an architecture name, one metadata key and no tensors."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
