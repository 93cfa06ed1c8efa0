"""OpenAI's gpt-oss (gpt-oss-20b, -120b; llama.cpp's `gpt-oss` arch, its openai-moe-iswa graph): attention
with biases on q, k, v and o and a learned sink logit per head in every softmax, every other layer a
128-token sliding window (the first one sliding), neox YaRN rope on all layers; in place of the MLP, routed
experts (MXFP4 in the released files) with biases, chosen by the top-k of the router's biased logits and
weighted by a softmax over those k (llama.cpp's SOFTMAX_WEIGHT gating), each a clamped SwiGLU (hearth.layers.activation's swiglu_oai).

Same math as transformers' GptOssForCausalLM; the file's one norm before the experts is named
post_attention_norm (hearth.models.transformer.DecoderLayer reads it as the MLP's norm)."""

from dataclasses import replace

import torch

from hearth.models.moe import MoE, moe_config
from hearth.models.transformer import ArchSpec, CausalLM, base_config, require

SLIDING_EVERY = 2  # llama.cpp's swa pattern 2, transformers' layer_types: even layers slide


class GptOssMoE(MoE):
    def route(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """h: [T, hidden] -> (softmax over the top-k logits f32 [T, k], their expert ids [T, k])."""
        top, ids = self.logits(h).topk(self.top_k, dim=-1)
        return torch.softmax(top, dim=-1), ids


class GptOssForCausalLM(CausalLM):
    spec = ArchSpec(neox_rope=True, activation="swiglu_oai", moe=True, attn_sinks=True)
    moe_block = GptOssMoE

    @classmethod
    def config_from_gguf(cls, g):
        layers = int(require(g, "block_count"))
        window = int(g.arch_get("attention.sliding_window", 0))
        cfg = base_config(
            g,
            sliding_window=window,
            sliding_window_pattern=tuple(i % SLIDING_EVERY == 0 for i in range(layers)) if window else (),
            **moe_config(g, weights_norm=False),
        )
        if cfg.rope_yarn is not None:  # the reference's YaRN keeps the ramp's ends unrounded (YarnScaling.truncate)
            cfg = replace(cfg, rope_yarn=replace(cfg.rope_yarn, truncate=False))
        return cfg
