"""Gemma 4's decoder layer (transformers' Gemma4TextDecoderLayer and Gemma4TextAttention, llama.cpp's
src/models/gemma4.cpp): Gemma 3's sandwich-normed block, with
- each layer's own head dim (global layers 512, sliding ones 256) and KV heads, attention scale 1 (q and k are
  RMS-normed per head);
- V RMS-normed without a weight; K's projection reused as V where the layer has no attn_v (attention_k_eq_v);
- KV-shared layers (the last num_kv_shared_layers): q alone, attending over an earlier layer's cache, which the
  model hands them (hearth.config.kv_source); they write nothing;
- after the MLP, the layer's per-layer input (hearth.models.per_layer_inputs) added through a gelu gate and a
  projection, normed; then the whole stream times the layer's output scalar.
The steps it shares with every decoder layer run on the backend's LayerOps; the fused whole-layer forms refuse
ArchSpec.v_norm, so none runs these layers."""

from __future__ import annotations

import torch

from hearth.config import ModelConfig, kv_source
from hearth.layers.activation import ACTIVATIONS
from hearth.layers.norm import RMSNorm
from hearth.loader.gguf_loader import GGUFFile
from hearth.models.arch_spec import ArchSpec
from hearth.models.gemma4_moe import Gemma4MoE
from hearth.models.gguf_tensors import f32, maybe_f32
from hearth.models.transformer import MLP, Attention, DecoderLayer


class Gemma4Attention(Attention):
    def __init__(self, cfg: ModelConfig, spec: ArchSpec, g: GGUFFile, i: int, backend, factors):
        p = f"blk.{i}."
        self.shared = kv_source(cfg, i) != i
        self.k_is_v = not self.shared and p + "attn_v.weight" not in g.tensors
        super().__init__(cfg, spec, g, i, backend, factors)
        self.v_norm = RMSNorm(torch.ones(self.head_dim), cfg.rms_norm_eps)  # transformers' with_scale=False

    def kv_names(self, g: GGUFFile, p: str) -> list[str]:
        if self.shared:
            return []
        return [p + "attn_k.weight"] + ([] if self.k_is_v else [p + "attn_v.weight"])


class Gemma4Layer(DecoderLayer):
    attention_class = Gemma4Attention

    def __init__(self, cfg: ModelConfig, spec: ArchSpec, g: GGUFFile, i: int, backend, factors):
        super().__init__(cfg, spec, g, i, backend, factors, Gemma4MoE)  # self.mlp: the experts on a MoE layer
        p = f"blk.{i}."
        self.dense = None
        if isinstance(self.mlp, Gemma4MoE):  # the dense MLP beside them, each branch normed before and after
            self.dense = MLP(cfg, spec, g, i, backend)
            self.dense_post, self.moe_pre, self.moe_post = (RMSNorm(f32(g, p + n + ".weight"), cfg.rms_norm_eps)
                                                            for n in ("post_ffw_norm_1", "pre_ffw_norm_2",
                                                                      "post_ffw_norm_2"))
        self.gate = self.proj = self.ple_norm = None
        if cfg.per_layer_input:
            self.gate = backend.linear(g.tensor(p + "inp_gate.weight"))  # [width, hidden]
            self.proj = backend.linear(g.tensor(p + "proj.weight"))  # [hidden, width]
            self.ple_norm = RMSNorm(f32(g, p + "post_norm.weight"), cfg.rms_norm_eps)
            self.act = ACTIVATIONS[spec.activation]
        scale = maybe_f32(g, p + "layer_output_scale.weight")  # [1]; transformers' layer_scalar
        self.out_scale = None if scale is None else float(scale.reshape(-1)[0])

    def forward(self, x, positions, meta, kv_cache, out_rows: list[int] | None = None,
                per_layer: torch.Tensor | None = None):
        """x: [T, hidden] f32; kv_cache: the layer's own, or a KV-shared layer's source's; per_layer: f32
        [T, width], its per-layer input -> after this layer, every row or only out_rows."""
        T, a, b = x.shape[0], self.attn, self.backend
        ops = self.ops.for_rows(T)
        y = ops.qkv(self, x)  # [T, q | k | v] f32 (q alone on a shared layer; q | k where k is v)
        if not a.shared:
            k = y[:, a.q_size:a.q_size + a.kv_size].view(T, a.kv_heads, a.head_dim)
            # K reused as V: a copy of k before its norm
            v = k.clone() if a.k_is_v else y[:, a.q_size + a.kv_size:].view(T, a.kv_heads, a.head_dim)
            a.v_norm(v, out=v)
        qk = y[:, :a.q_size + (0 if a.shared else a.kv_size)]
        ops.qk_rope(self, qk.view(T, -1, a.head_dim), positions, meta)  # q's heads (and k's): normed, rotated
        if not a.shared:
            kv = torch.stack([k, v], 1) if a.k_is_v else y[:, a.q_size:].view(T, 2, a.kv_heads, a.head_dim)
            b.write_kv(kv_cache, kv, meta)
        attn = b.attention(y[:, :a.q_size].view(T, a.heads, a.head_dim), kv_cache, meta, a.scale, a.window,
                           a.softcap, a.precise_scores, a.sinks).view(T, a.q_size)
        if out_rows is not None:  # only these rows past attention
            if not out_rows:
                return x[:0]
            x, attn = x[out_rows], attn[out_rows]
            per_layer = None if per_layer is None else per_layer[out_rows]
        x = ops.out_add(self, attn, x)
        x = ops.mlp_add(self, x) if self.dense is None else self.moe_add(x)
        if self.gate is not None:
            x = self.add_per_layer_input(x, per_layer)
        if self.out_scale is not None:
            x.mul_(self.out_scale)
        return x

    def moe_add(self, x: torch.Tensor) -> torch.Tensor:
        """x + post(post_1(dense(norm(x))) + post_2(experts(norm_2(x)))), the experts routed from x; f32 [T, hidden]."""
        h = self.dense_post(self.dense(self.ffn_norm(x).to(self.dense.in_dtype)).float())
        h += self.moe_post(self.mlp.mixed(x, self.moe_pre(x)))
        return x.add_(self.post_ffn_norm(h))

    def add_per_layer_input(self, x: torch.Tensor, per_layer: torch.Tensor) -> torch.Tensor:
        """x + norm(proj(gelu(gate(x)) * per_layer)); x: [T, hidden] f32, per_layer: [T, width] f32."""
        h = self.act(self.gate(x.to(self.gate.in_dtype)).float()).mul_(per_layer)
        return x.add_(self.ple_norm(self.proj(h.to(self.proj.in_dtype)).float()))
