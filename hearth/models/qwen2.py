"""Qwen2 / Qwen2.5: llama's block with biases on q, k and v, and rotate-half (neox) rope."""

from hearth.models.transformer import ArchSpec, CausalLM, base_config


class Qwen2ForCausalLM(CausalLM):
    # the q/k/v biases are picked up from the file (blk.N.attn_{q,k,v}.bias) by the shared Attention
    spec = ArchSpec(neox_rope=True, activation="silu")

    @classmethod
    def config_from_gguf(cls, g):
        return base_config(g)
