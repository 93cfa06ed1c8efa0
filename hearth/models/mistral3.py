"""Ministral 3 (mistral3: Ministral3ForCausalLM, Mistral3's text model): llama's block (q/k rows permuted for
adjacent-pair rope) with YaRN rope (rope.scaling.*, its yarn_log_multiplier: transformers' mscale_all_dim) and
Llama 4-style attention temperature: queries times 1 + attention.temperature_scale * ln(1 + floor(pos / the
original context)) (hearth.layers.attn_temperature), as llama.cpp's mistral3 graph and transformers'
Ministral3ForCausalLM. A file without the key (Mistral Small 3.1's text model) runs llama's block alone."""

from dataclasses import replace

from hearth.models.transformer import ArchSpec, CausalLM, base_config


class Mistral3ForCausalLM(CausalLM):
    spec = ArchSpec(neox_rope=False, activation="silu")

    @classmethod
    def config_from_gguf(cls, g):
        cfg = base_config(g)
        beta = float(g.arch_get("attention.temperature_scale", 0.0))
        # the floor scale is the file's original context (llama.cpp's n_ctx_orig_yarn), whatever the engine's rope
        floor = cfg.rope_original_context or cfg.context_length
        return replace(cfg, attn_temperature_scale=beta, attn_temperature_floor=floor) if beta else cfg
