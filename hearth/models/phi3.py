"""Phi-3 and Phi-4-mini: llama's block with q, k and v in one matrix (attn_qkv) and gate and up in one
(ffn_up, rows [gate | up]), rope over halves (on the first rope.dimension_count dims of a head:
Phi-4-mini rotates 3/4), an optional sliding window on every layer, and LongRoPE for the 128k models
(hearth.layers.rotary.RopeFactors: short and long factors, the long ones past the original context,
cos and sin scaled by the attention factor)."""

from hearth.models.transformer import ArchSpec, CausalLM, base_config, require


class Phi3ForCausalLM(CausalLM):
    spec = ArchSpec(neox_rope=True, activation="silu")

    @classmethod
    def config_from_gguf(cls, g):
        layers = int(require(g, "block_count"))
        window = int(g.arch_get("attention.sliding_window", 0))
        return base_config(g, sliding_window=window, sliding_window_pattern=(True,) * layers if window else ())
