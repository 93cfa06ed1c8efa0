"""Llama (and SmolLM2, Mistral-style dense) models."""

from hearth.models.transformer import ArchSpec, CausalLM, base_config


class LlamaForCausalLM(CausalLM):
    spec = ArchSpec(neox_rope=False, activation="silu")

    @classmethod
    def config_from_gguf(cls, g):
        return base_config(g)
