"""OLMo 2 (AllenAI): no norm before attention or the MLP; RMSNorms after each (post_attention_norm,
post_ffw_norm) before its residual add; q's and k's RMSNorm each over its whole projection (attn_q_norm
[heads * head_dim], attn_k_norm [kv_heads * head_dim]), before rope over halves. Same math as llama.cpp's
olmo2 graph and transformers' Olmo2ForCausalLM; the fused C++ layer takes null pre-norms and its whole q/k norms
(hk_layer_qk_whole); the Triton layer ops neither (the CUDA backend refuses it).

OLMo 3's files (arch olmo2 with attention.sliding_window) are refused: their sliding layers are not read."""

from hearth.errors import UnsupportedError
from hearth.models.transformer import ArchSpec, CausalLM, base_config


class Olmo2ForCausalLM(CausalLM):
    spec = ArchSpec(neox_rope=True, activation="silu", qk_norm=True, qk_norm_whole=True, sandwich_norm=True,
                    pre_norm=False)

    @classmethod
    def config_from_gguf(cls, g):
        if g.arch_get("attention.sliding_window", 0):
            raise UnsupportedError(f"{g.path}: an olmo2 file with a sliding window (OLMo 3): not implemented")
        return base_config(g)
