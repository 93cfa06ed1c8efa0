"""Qwen3.5 (dense 0.8B-27B; llama.cpp's `qwen35`, transformers' Qwen3_5ForCausalLM): most layers a
Gated DeltaNet (hearth.models.delta_net, its state a per-sequence slot's), every `full_attention_interval`-th
(4) gated attention: q_proj emits per head the query and a gate, the attention's output times sigmoid(gate);
q/k RMSNorm per head, partial neox rope with interleaved M-RoPE sections (text: every component equal, so plain
rope); the norm after attention (post_attention_norm) is the MLP's input norm.

Images (--mmproj: the converter's qwen3vl_merger file of Qwen3_5ForConditionalGeneration): their rows take the
positions Qwen3-VL's text model takes (Qwen3_5Model.get_rope_index is Qwen3-VL's; the runner's
hearth.runner.rope_positions, as for any ModelConfig.rope_sections), and no deepstack parts (Qwen3.5's tower has
none; llama.cpp's qwen35.cpp adds none); the DeltaNet layers read image rows as any rows.

The converter (conversion/qwen.py, Qwen3NextModel.modify_tensors) folds Qwen3.5's zero-centred norms' +1 into
every `*norm.weight` but the DeltaNet's gated head norm, so every norm here multiplies by its weight as stored.
Which layers recur: `{arch}.attention.recurrent_layers` where written, else every layer but each interval-th.
`qwen35moe` (Qwen3.5-MoE): the same layers over routed experts and a gated shared expert (hearth.models.moe_shared)."""

from __future__ import annotations

from dataclasses import replace

import torch

from hearth.config import RecurrentShape
from hearth.errors import UnsupportedError
from hearth.models.delta_net import DeltaNetLayer
from hearth.models.moe import moe_config
from hearth.models.moe_shared import SharedExpertMoE
from hearth.models.qwen2vl import mrope_sections
from hearth.models.transformer import ArchSpec, CausalLM, DecoderLayer, base_config, require


class GatedAttentionLayer(DecoderLayer):
    """A DecoderLayer whose q rows are [query | gate] per head (llama.cpp's Qcur_full): the backend runs it op
    by op (ArchSpec.attn_output_gate, which no fused layer implements)."""

    def forward(self, x, positions, meta, kv_cache, out_rows: list[int] | None = None):
        T, a, b = x.shape[0], self.attn, self.backend
        ops = self.ops.for_rows(T)
        y = ops.qkv(self, x)  # [T, 2 q | k | v] f32
        qg = y[:, :2 * a.q_size].view(T, a.heads, 2, a.head_dim)
        gate = qg[:, :, 1].reshape(T, a.q_size)
        k, v = y[:, 2 * a.q_size:].view(T, 2, a.kv_heads, a.head_dim).unbind(1)
        qk = torch.cat([qg[:, :, 0], k], dim=1)  # [T, heads + kv_heads, head_dim]: normed and rotated in place
        ops.qk_rope(self, qk, positions, meta)
        b.write_kv(kv_cache, torch.stack([qk[:, a.heads:], v], dim=1), meta)
        attn = b.attention(qk[:, :a.heads].contiguous(), kv_cache, meta, a.scale, a.window, a.softcap,
                           a.precise_scores, a.sinks).view(T, a.q_size)
        attn = attn * gate.sigmoid()
        if out_rows is not None:
            if not out_rows:
                return x[:0]
            x, attn = x[out_rows], attn[out_rows]
        return ops.mlp_add(self, ops.out_add(self, attn, x))


class Qwen35ForCausalLM(CausalLM):
    spec = ArchSpec(neox_rope=True, activation="silu", qk_norm=True, attn_output_gate=True)

    def block(self, cfg, g, i, backend, factors):
        if cfg.recurrent_layers[i]:
            return DeltaNetLayer(cfg, self.spec, g, i, backend, self.moe_block)
        return self.attention_block(cfg, g, i, backend, factors)

    def attention_block(self, cfg, g, i, backend, factors) -> GatedAttentionLayer:
        """Layer i as a gated attention layer (the MTP block's too: hearth.models.mtp_head)."""
        return GatedAttentionLayer(cfg, self.spec, g, i, backend, factors, self.moe_block)

    @classmethod
    def config_from_gguf(cls, g):
        # routed experts only (qwen35moe): the converter writes no feed_forward_length
        dense = {} if g.arch_get("feed_forward_length") or not g.arch_get("expert_count") else {"intermediate_size": 0}
        cfg = base_config(g, rope_layout="interleaved", **dense)
        cfg.rope_sections = mrope_sections(g, cfg)
        # multi-token-prediction blocks follow the trunk's (llama.cpp's n_layer_nextn): not run, as llama.cpp's
        # main pass runs none of them (the MTP proposer builds its head: hearth.models.mtp_head)
        n_all = cfg.num_layers
        n = cfg.num_layers = n_all - int(g.arch_get("nextn_predict_layers", 0) or 0)
        stated = g.arch_get("attention.recurrent_layers")
        if isinstance(stated, list) and len(stated) == n_all:
            cfg.recurrent_layers = tuple(bool(r) for r in stated[:n])
        else:  # llama.cpp's default: every interval-th layer attends
            every = int(g.arch_get("full_attention_interval", 4))
            cfg.recurrent_layers = tuple((i + 1) % every != 0 for i in range(n))
        v_heads, k_heads = int(require(g, "ssm.time_step_rank")), int(require(g, "ssm.group_count"))
        if v_heads % k_heads:
            raise UnsupportedError(f"{g.path}: {v_heads} value heads over {k_heads} key heads: not a whole number each")
        cfg.recurrent = RecurrentShape(k_heads=k_heads, v_heads=v_heads, k_dim=int(require(g, "ssm.state_size")),
                                       v_dim=int(require(g, "ssm.inner_size")) // v_heads,
                                       conv_kernel=int(require(g, "ssm.conv_kernel")))
        return cfg


class Qwen35MoeForCausalLM(Qwen35ForCausalLM):
    """Qwen3.5-MoE (llama.cpp's `qwen35moe`): the same layers, each MLP routed experts (softmax, top-k renormalized,
    as llama.cpp's graph passes norm_w) plus a sigmoid-gated shared expert."""

    spec = replace(Qwen35ForCausalLM.spec, moe=True)
    moe_block = SharedExpertMoE

    @classmethod
    def config_from_gguf(cls, g):
        cfg = super().config_from_gguf(g)
        for name, value in moe_config(g, weights_norm=True).items():
            setattr(cfg, name, value)
        return cfg
