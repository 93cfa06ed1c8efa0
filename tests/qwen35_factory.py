"""A tiny random Qwen3.5 from transformers (Qwen3_5ForCausalLM, f32, eager), written as a GGUF the way llama.cpp's
converter writes it: vendor/llama.cpp/conversion/qwen.py, Qwen3_5TextModel = _Qwen35MRopeMixin +
_LinearAttentionVReorderBase + Qwen3NextModel (+ conversion/base.py's TextModel.set_gguf_parameters):
- keys: the ssm.* dims (conv_kernel, state_size = linear_key_head_dim, group_count = linear_num_key_heads,
  time_step_rank = linear_num_value_heads, inner_size = v_dim * v_heads), attention.recurrent_layers from
  layer_types, full_attention_interval, rope.dimension_count = head_dim * partial_rotary_factor,
  rope.dimension_sections = mrope_section padded to 4, key_length / value_length = head_dim;
- tensors: A_log -> ssm_a = -exp(A_log), dt_bias -> ssm_dt.bias, conv1d [C, 1, K] squeezed to [C, K], every
  `*norm.weight` + 1 but linear_attn.norm's (Qwen3.5's norms are zero-centred), and with fewer key than value
  heads the value heads reordered from grouped to tiled (_reorder_v_heads) in in_proj_qkv's v rows, in_proj_z,
  in_proj_a/b, A_log, dt_bias, conv1d's v channels and out_proj's columns;
- names: gguf-py's tensor map for MODEL_ARCH.QWEN35 (in_proj_qkv -> attn_qkv, in_proj_z -> attn_gate,
  in_proj_b -> ssm_beta, in_proj_a -> ssm_alpha, post_attention_layernorm -> post_attention_norm, ...).
With `mtp` (hf_mtp: transformers' model drops a checkpoint's mtp.* tensors, so they are made here), the multi-token-
prediction block as _QwenMtpMixin writes it: block_count + 1, nextn_predict_layers 1, recurrent_layers + [False],
mtp.fc -> blk.{n}.nextn.eh_proj, pre_fc_norm_embedding -> nextn.enorm, pre_fc_norm_hidden -> nextn.hnorm,
norm -> nextn.shared_head_norm (each + 1, as every `*norm.weight`), mtp.layers.0.* -> blk.{n}.* (a full-attention
layer's names).
The MoE variant (Qwen3_5MoeForCausalLM, `qwen35moe`; Qwen3_5MoeTextModel, + Qwen2MoeModel's): expert_count,
expert_used_count, expert_feed_forward_length, expert_shared_feed_forward_length and no feed_forward_length; the
experts' gate_up_proj [E, 2 ffn, hidden] split into ffn_gate_exps and ffn_up_exps, down_proj -> ffn_down_exps,
the router mlp.gate -> ffn_gate_inp, the shared expert -> ffn_*_shexp and its gate -> ffn_gate_inp_shexp."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import torch
import transformers

from tests.gguf_factory import MATRIX_TYPES, TinyDims, _add_tensor, _write_tokenizer

LAYER_TYPES = ("linear_attention", "linear_attention", "linear_attention", "full_attention",
               "linear_attention", "full_attention")
DIMS = TinyDims(layers=len(LAYER_TYPES), hidden=64, heads=4, kv_heads=2, head_dim=32, ffn=96, vocab=320,
                context=256, rms_eps=1e-6)


@dataclass(frozen=True)
class Linear:
    """The DeltaNet's dims (tiny): 2 key heads serving 4 value heads, so the converter's reorder matters."""

    k_heads: int = 2
    v_heads: int = 4
    k_dim: int = 16
    v_dim: int = 16  # = k_dim, as llama.cpp requires (its loader sizes the value heads by ssm.state_size)
    kernel: int = 4


LIN = Linear()


@dataclass(frozen=True)
class Experts:
    count: int = 4
    used: int = 2
    ffn: int = 32
    shared_ffn: int = 48


EXPERTS = Experts()
SECTIONS = [2, 1, 1]  # 4 rotated pairs: head_dim 32 x partial 0.25 = 8 dims


def hf_config(d: TinyDims = DIMS, lin: Linear = LIN, moe: Experts | None = None,
              layer_types: tuple[str, ...] = LAYER_TYPES, sections: list[int] = SECTIONS):
    """transformers' text config of these shapes (benchmarks/qwen35_shapes.py's too)."""
    ffn = (dict(num_experts=moe.count, num_experts_per_tok=moe.used, moe_intermediate_size=moe.ffn,
                shared_expert_intermediate_size=moe.shared_ffn) if moe else dict(intermediate_size=d.ffn))
    return (transformers.Qwen3_5MoeTextConfig if moe else transformers.Qwen3_5TextConfig)(
        vocab_size=d.vocab, hidden_size=d.hidden, num_hidden_layers=d.layers, **ffn,
        num_attention_heads=d.heads, num_key_value_heads=d.kv_heads, head_dim=d.head_dim,
        max_position_embeddings=d.context, rms_norm_eps=d.rms_eps, tie_word_embeddings=True,
        layer_types=list(layer_types), linear_conv_kernel_dim=lin.kernel, linear_key_head_dim=lin.k_dim,
        linear_value_head_dim=lin.v_dim, linear_num_key_heads=lin.k_heads, linear_num_value_heads=lin.v_heads,
        rope_parameters={"rope_type": "default", "rope_theta": d.rope_theta, "partial_rotary_factor": 0.25,
                         "mrope_section": sections, "mrope_interleaved": True})


def hf_qwen35(seed: int = 0, d: TinyDims = DIMS, lin: Linear = LIN, moe: Experts | None = None):
    """transformers' f32 model (Qwen3_5ForCausalLM, or with `moe` Qwen3_5MoeForCausalLM), every weight random:
    norms near their zero centre (+-0.2), matrices with ~unit-variance outputs, A (exp(A_log)) in [0.02, 1]: each
    state forgets slowly, so a state carried where it should not be, or lost, changes the text."""
    cfg = hf_config(d, lin, moe)
    cfg._attn_implementation = "eager"
    model = (transformers.Qwen3_5MoeForCausalLM if moe else transformers.Qwen3_5ForCausalLM)(cfg).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("linear_attn.norm.weight"):  # not zero-centred
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            elif "norm" in name:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("A_log"):  # slow decays: a state that remembers far back (a stale one shows)
                p.copy_(torch.log(torch.empty(p.shape).uniform_(0.02, 1, generator=g)))
            elif name.endswith("dt_bias"):
                p.copy_(torch.randn(p.shape, generator=g))
            elif "conv1d" in name:  # [C, 1, K]
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:  # (a router's too: near-even odds, so top-k choices stay apart from ties)
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
    return model


MTP_NAMES = {"fc": "eh_proj", "pre_fc_norm_embedding": "enorm", "pre_fc_norm_hidden": "hnorm",
             "norm": "shared_head.norm"}
"""_QwenMtpMixin.filter_tensors' remapper: mtp.{key}.weight -> model.layers.{n}.{value}.weight."""


def hf_mtp(seed: int = 1, d: TinyDims = DIMS) -> dict[str, torch.Tensor]:
    """A checkpoint's mtp.* tensors (Qwen3_5 MTP: fc [hidden, 2 hidden] over [embedding | hidden], its three norms
    zero-centred, one full-attention layer whose q_proj emits per head [query | gate]), random as hf_qwen35's."""
    h, q, kv = d.hidden, d.heads * d.head_dim, d.kv_heads * d.head_dim
    shapes = {"fc": (h, 2 * h), "pre_fc_norm_embedding": (h,), "pre_fc_norm_hidden": (h,), "norm": (h,),
              "layers.0.input_layernorm": (h,), "layers.0.post_attention_layernorm": (h,),
              "layers.0.self_attn.q_proj": (2 * q, h), "layers.0.self_attn.k_proj": (kv, h),
              "layers.0.self_attn.v_proj": (kv, h), "layers.0.self_attn.o_proj": (h, q),
              "layers.0.self_attn.q_norm": (d.head_dim,), "layers.0.self_attn.k_norm": (d.head_dim,),
              "layers.0.mlp.gate_proj": (d.ffn, h), "layers.0.mlp.up_proj": (d.ffn, h),
              "layers.0.mlp.down_proj": (h, d.ffn)}
    g = torch.Generator().manual_seed(seed)
    return {f"mtp.{k}.weight": 0.2 * torch.randn(s, generator=g) if len(s) == 1
            else torch.randn(s, generator=g) / s[-1] ** 0.5 for k, s in shapes.items()}


def _mtp_named(mtp: dict[str, torch.Tensor], n: int):
    """(model.layers.{n}.* name, tensor): _QwenMtpMixin.filter_tensors' renaming."""
    for name, t in mtp.items():
        key = name.removeprefix("mtp.").removesuffix(".weight")
        key = key.removeprefix("layers.0.") if key.startswith("layers.0.") else MTP_NAMES[key]
        yield f"model.layers.{n}.{key}.weight", t


def _nextn_name(base: str, n: int) -> str | None:
    """gguf-py's constants.py name of an MTP-only tensor (blk.{n}.nextn.*): the tensor map of the gguf-py installed
    here lists none of them for QWEN35 (llama.cpp's newer one does)."""
    key = base.removeprefix(f"model.layers.{n}.")
    return f"blk.{n}.nextn.{key.replace('.', '_')}" if key in MTP_NAMES.values() else None


def _tiled(t: torch.Tensor, dim: int, lin: Linear, head_dim: int) -> torch.Tensor:
    """_LinearAttentionVReorderBase._reorder_v_heads: value heads grouped by key head -> tiled."""
    shape = list(t.shape)
    dim %= len(shape)
    r = lin.v_heads // lin.k_heads
    t = t.reshape(*shape[:dim], lin.k_heads, r, head_dim, *shape[dim + 1:]).transpose(dim, dim + 1)
    return t.contiguous().reshape(shape)


def _converted(name: str, t: torch.Tensor, lin: Linear) -> torch.Tensor:
    """Qwen3NextModel.modify_tensors after the v-head reorder, for one HF tensor."""
    if "linear_attn." in name and lin.k_heads != lin.v_heads:
        kd = lin.k_heads * lin.k_dim
        if ".in_proj_qkv." in name or ".conv1d." in name:
            t = t.squeeze() if ".conv1d." in name else t
            t = torch.cat([t[:2 * kd], _tiled(t[2 * kd:], 0, lin, lin.v_dim)])
        elif ".in_proj_z." in name:
            t = _tiled(t, 0, lin, lin.v_dim)
        elif ".in_proj_a." in name or ".in_proj_b." in name or name.endswith((".A_log", ".dt_bias")):
            t = _tiled(t, 0, lin, 1)
        elif ".out_proj." in name:
            t = _tiled(t, 1, lin, lin.v_dim)
    if name.endswith(".A_log"):
        return -torch.exp(t)
    if "conv1d" in name:
        return t.squeeze()
    if name.endswith("norm.weight") and not name.endswith("linear_attn.norm.weight"):
        return t + 1
    return t


def _split_experts(state: dict):
    """(name, tensor), the experts' gate_up_proj as Qwen2MoeModel.modify_tensors yields it: gate_proj, up_proj."""
    for name, t in state.items():
        if name.endswith("mlp.experts.gate_up_proj"):
            gate, up = t.chunk(2, dim=-2)
            base = name.removesuffix(".gate_up_proj")
            yield base + ".gate_proj.weight", gate
            yield base + ".up_proj.weight", up
        elif name.endswith("mlp.experts.down_proj"):
            yield name + ".weight", t
        else:
            yield name, t


def write_qwen35_gguf(path, model, qtype: str = "F32", d: TinyDims = DIMS, lin: Linear = LIN,
                      moe: Experts | None = None, chat_template: str | None = None,
                      mtp: dict[str, torch.Tensor] | None = None, layer_types: tuple[str, ...] = LAYER_TYPES,
                      sections: list[int] = SECTIONS) -> Path:
    """chat_template: tokenizer.chat_template (none by default, as a base model's file); mtp: hf_mtp's tensors,
    written as the converter writes the MTP block (none by default). layer_types, sections: the model's
    (mrope_section; a bigger one than the tiny model's: benchmarks/qwen35_shapes.py)."""
    blocks = d.layers + (1 if mtp else 0)
    arch = "qwen35moe" if moe else "qwen35"
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny-{arch}")
    w.add_context_length(d.context)
    w.add_embedding_length(d.hidden)
    w.add_block_count(blocks)
    if mtp:
        w.add_nextn_predict_layers(1)
    if moe:
        w.add_expert_count(moe.count)
        w.add_expert_used_count(moe.used)
        w.add_expert_feed_forward_length(moe.ffn)
        w.add_expert_shared_feed_forward_length(moe.shared_ffn)
    else:
        w.add_feed_forward_length(d.ffn)
    w.add_head_count(d.heads)
    w.add_head_count_kv(d.kv_heads)
    w.add_rope_freq_base(d.rope_theta)
    w.add_layer_norm_rms_eps(d.rms_eps)
    w.add_key_length(d.head_dim)
    w.add_value_length(d.head_dim)
    w.add_vocab_size(d.vocab)
    w.add_rope_dimension_sections(list(sections) + [0])
    w.add_ssm_conv_kernel(lin.kernel)
    w.add_ssm_state_size(lin.k_dim)
    w.add_ssm_group_count(lin.k_heads)
    w.add_ssm_time_step_rank(lin.v_heads)
    w.add_ssm_inner_size(lin.v_dim * lin.v_heads)
    w.add_array(f"{arch}.attention.recurrent_layers", [t == "linear_attention" for t in layer_types]
                + [False] * (blocks - d.layers))
    w.add_full_attention_interval(4)
    w.add_rope_dimension_count(int(d.head_dim * 0.25))
    w.add_file_type(0)
    _write_tokenizer(w, d)
    if chat_template is not None:
        w.add_chat_template(chat_template)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN35MOE if moe else gguf.MODEL_ARCH.QWEN35, blocks)
    tensors = [*_split_experts(model.state_dict()), *_mtp_named(mtp or {}, d.layers)]
    for name, t in tensors:
        if name == "lm_head.weight":
            continue  # tied
        t = _converted(name, t.detach().float(), lin)
        base, suffix = (name[:-len(".weight")], ".weight") if name.endswith(".weight") else (name, "")
        if name.endswith(".dt_bias"):  # Qwen3NextModel: renamed to dt_proj.bias, which maps to ssm_dt.bias
            base, suffix = name.removesuffix(".dt_bias") + ".dt_proj", ".bias"
        mapped = _nextn_name(base, d.layers) or names.get_name(base)
        assert mapped is not None, name
        kind = "F32" if t.ndim == 1 or "conv1d" in name else qtype  # llama-quantize keeps ssm_conv1d (and routers)
        _add_tensor(w, mapped + suffix, t.numpy(), MATRIX_TYPES[kind])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


FILES = {"qwen35": "tiny-qwen35.gguf", "qwen35moe": "tiny-qwen35moe.gguf"}
"""The files benchmarks/make_qwen35_golden.py runs llama.cpp on (write_files)."""
PROMPTS = [[int(t) for t in torch.randint(0, DIMS.vocab, (n,), generator=torch.Generator().manual_seed(n))]
           for n in (3, 11, 26)]
NEW = 16


def write_files(folder: Path) -> dict[str, Path]:
    """FILES in folder, F32: qwen35 (seed 0) and qwen35moe (seed 2)."""
    folder.mkdir(parents=True, exist_ok=True)
    return {"qwen35": write_qwen35_gguf(folder / FILES["qwen35"], hf_qwen35()),
            "qwen35moe": write_qwen35_gguf(folder / FILES["qwen35moe"], hf_qwen35(seed=2, moe=EXPERTS), moe=EXPERTS)}


if __name__ == "__main__":
    import sys

    print(write_files(Path(sys.argv[1])))
