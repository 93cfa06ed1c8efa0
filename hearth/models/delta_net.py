"""Qwen3.5's Gated DeltaNet layer (transformers' Qwen3_5GatedDeltaNet, llama.cpp's build_layer_attn_linear):
q | k | v = in_proj(norm(h)), a causal conv over those channels then silu; q and k L2-normed per head; the
gated delta rule with decay ssm_a * softplus(alpha + dt) and write strength sigmoid(beta); each head's output
RMS-normed and gated by silu(z); out_proj; then the same MLP as an attention layer (qwen35moe: routed experts).

Between in_proj and out_proj (the conv .. the gated norm) is the backend's mixer (Backend.delta_mixer: torch's in
hearth.layers.delta_mixer, one native call on the CPU backend). Its state is a per-sequence slot's
(hearth.kvstore.recurrent), found through the step's metadata. llama.cpp's
converter reorders the value heads from grouped by key head to tiled (conversion/qwen.py,
_LinearAttentionVReorderBase): value head j reads key head j % k_heads, so q and k repeat whole, not per head."""

from __future__ import annotations

from torch import nn

from hearth.config import ModelConfig
from hearth.layers.norm import RMSNorm
from hearth.loader.gguf_loader import GGUFFile
from hearth.models.arch_spec import ArchSpec
from hearth.models.gguf_tensors import f32
from hearth.models.moe import MoE
from hearth.models.transformer import feed_forward


class DeltaNetLayer(nn.Module):
    lora_ops = None

    def __init__(self, cfg: ModelConfig, spec: ArchSpec, g: GGUFFile, i: int, backend, moe_block: type[MoE] = MoE):
        super().__init__()
        p, eps, r = f"blk.{i}.", cfg.rms_norm_eps, cfg.recurrent
        self.index, self.shape, self.eps = i, r, eps
        # rows: q | k | v (conv channels), z (the output gate), beta, alpha: one matmul
        self.in_proj = backend.linear([g.tensor(p + n) for n in ("attn_qkv.weight", "attn_gate.weight",
                                                                  "ssm_beta.weight", "ssm_alpha.weight")])
        self.splits = [r.conv_channels, r.v_heads * r.v_dim, r.v_heads, r.v_heads]
        self.out_proj = backend.linear(g.tensor(p + "ssm_out.weight"))
        self.register_buffer("conv_w", f32(g, p + "ssm_conv1d.weight"), persistent=False)  # [channels, kernel]
        self.register_buffer("a", f32(g, p + "ssm_a"), persistent=False)  # [v_heads]: -exp(A_log), the converter's
        self.register_buffer("dt", f32(g, p + "ssm_dt.bias"), persistent=False)  # [v_heads]
        self.head_norm = RMSNorm(f32(g, p + "ssm_norm.weight"), eps)  # [v_dim], no +1 (the converter adds none)
        self.mlp = feed_forward(cfg, spec, g, i, backend, moe_block)  # qwen35moe: routed experts
        self.attn_norm = RMSNorm(f32(g, p + "attn_norm.weight"), eps)
        self.ffn_norm = RMSNorm(f32(g, p + "post_attention_norm.weight"), eps)  # before the MLP
        self.attn_norm.out_dtype, self.ffn_norm.out_dtype = self.in_proj.in_dtype, self.mlp.in_dtype
        self.post_ffn_norm = None
        self.ops = backend.conv_ops(self)  # in_proj, out_proj and the MLP, as a short-conv layer's
        self.mix = backend.delta_mixer(self)  # conv .. gated norm: hearth.layers.delta_mixer's, or a native twin

    def forward(self, x, positions, meta, cache, out_rows: list[int] | None = None):
        """x: [T, hidden] f32, the residual stream -> after this layer, every row or only out_rows (every row
        moves its sequence's state). cache: unused (LayerCache of 0 parts): the state is meta.recurrent's."""
        ops = self.ops.for_rows(x.shape[0])
        qkv, z, beta, alpha = ops.conv_in(self, x).split(self.splits, dim=-1)
        y = self.mix(self, qkv, z, beta, alpha, meta)  # [T, v_heads * v_dim]
        if out_rows is not None:
            if not out_rows:
                return x[:0]
            x, y = x[out_rows], y[out_rows]
        return ops.mlp_add(self, ops.conv_out_add(self, y, x))
