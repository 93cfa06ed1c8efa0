"""Llama (and SmolLM2, Mistral-style dense) models, and Mixtral's routed experts in llama files (their
expert_count: softmax over the experts, top-k renormalized, as llama.cpp's llama graph runs them)."""

from hearth.models.moe import moe_config
from hearth.models.transformer import ArchSpec, CausalLM, base_config


class LlamaForCausalLM(CausalLM):
    spec = ArchSpec(neox_rope=False, activation="silu")

    @classmethod
    def config_from_gguf(cls, g):
        return base_config(g, **(moe_config(g, weights_norm=True) if g.arch_get("expert_count") else {}))
