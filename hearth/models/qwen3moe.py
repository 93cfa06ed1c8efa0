"""Qwen3-MoE (Qwen3-30B-A3B, 235B-A22B): Qwen3's attention (q/k norms, neox rope) with routed experts
in place of the dense MLP (hearth.models.moe): softmax over all experts, top-k, renormalized to sum
to 1 (llama.cpp's qwen3moe graph passes norm_w=true; transformers' norm_topk_prob for GGUF files)."""

from hearth.models.moe import moe_config
from hearth.models.transformer import ArchSpec, CausalLM, base_config


class Qwen3MoeForCausalLM(CausalLM):
    spec = ArchSpec(neox_rope=True, activation="silu", qk_norm=True, moe=True)

    @classmethod
    def config_from_gguf(cls, g):
        return base_config(g, **moe_config(g, weights_norm=True))
