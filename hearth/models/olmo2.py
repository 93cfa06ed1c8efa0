"""OLMo 2 and OLMo 3 (AllenAI): no norm before attention or the MLP; RMSNorms after each (post_attention_norm,
post_ffw_norm) before its residual add; q's and k's RMSNorm each over its whole projection (attn_q_norm
[heads * head_dim], attn_k_norm [kv_heads * head_dim]), before rope over halves. Same math as llama.cpp's
olmo2 graph and transformers' Olmo2ForCausalLM / Olmo3ForCausalLM; the fused C++ layer takes null pre-norms and
its whole q/k norms (hk_layer_qk_whole); the Triton layer ops neither (the CUDA backend refuses it).

OLMo 3's files are olmo2 ones with attention.sliding_window: 3 of 4 layers sliding (the pattern array the
converter writes from layer_types, else every 4th layer full, as llama.cpp's load_swa_pattern(4)); the sliding
layers rotate unscaled at the file's base (llama.cpp: freq_scale 1, no YaRN; transformers: their own default
rope), the full ones with the file's scaling (YaRN in OLMo 3's long-context files)."""

from dataclasses import replace

from hearth.models.transformer import ArchSpec, CausalLM, base_config, require

SWA_PATTERN = 4  # llama.cpp's olmo2 default: layers 0, 1, 2 sliding, 3 full, ...


def swa_pattern(value, layers: int) -> tuple[bool, ...]:
    """attention.sliding_window_pattern as llama.cpp reads it: a per-layer array of bools, or n (every n-th full)."""
    if isinstance(value, (list, tuple)):
        return tuple(bool(v) for v in value)
    n = int(value or SWA_PATTERN)
    return tuple(i % n < n - 1 for i in range(layers))


class Olmo2ForCausalLM(CausalLM):
    spec = ArchSpec(neox_rope=True, activation="silu", qk_norm=True, qk_norm_whole=True, sandwich_norm=True,
                    pre_norm=False)

    @classmethod
    def config_from_gguf(cls, g):
        window = int(g.arch_get("attention.sliding_window", 0))
        if not window:
            return base_config(g)
        cfg = base_config(g, sliding_window=window,
                          sliding_window_pattern=swa_pattern(g.arch_get("attention.sliding_window_pattern"),
                                                             int(require(g, "block_count"))))
        # the sliding layers at the file's freq_base unscaled (llama.cpp's graph reads no freq_base_swa here; its
        # --rope-freq-base moves them too, hearth's the full layers only)
        return replace(cfg, rope_local_theta=cfg.rope_theta)
