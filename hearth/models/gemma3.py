"""Gemma 3 (text): interleaved sliding-window / global attention, sandwich norms, q/k norms,
embeddings scaled by sqrt(hidden), gelu-tanh MLP, tied output head.

Norm weights need no +1 here: llama.cpp's converter stores Gemma's (1 + w) already added
(convert_hf_to_gguf.py Gemma3Model.norm_shift); transformers subtracts it again on GGUF load."""

import math

from hearth.models.transformer import ArchSpec, CausalLM, base_config, require

# llama.cpp (llama_model gemma3 hparams) and transformers (Gemma3TextConfig.layer_types) both make
# every 6th layer global and the rest sliding; the file does not state the pattern.
GLOBAL_EVERY = 6
# sliding layers rotate with this base; only the global ones use rope.freq_base and its scaling
LOCAL_ROPE_BASE = 10000.0
GEMMA3_27B_LAYERS = 62


class Gemma3ForCausalLM(CausalLM):
    spec = ArchSpec(neox_rope=True, activation="gelu_tanh", qk_norm=True, sandwich_norm=True, embed_scale=True)

    @classmethod
    def config_from_gguf(cls, g):
        layers = int(require(g, "block_count"))
        window = int(g.arch_get("attention.sliding_window", 0))
        # no window in the file means every layer is global (llama.cpp's non-iswa gemma3 graph)
        pattern = tuple((i + 1) % GLOBAL_EVERY != 0 for i in range(layers)) if window else ()
        return base_config(
            g,
            sliding_window=window,
            sliding_window_pattern=pattern,
            rope_local_theta=float(g.arch_get("rope.freq_base_swa", LOCAL_ROPE_BASE)),
            attn_scale=attn_scale(g, layers, GEMMA3_27B_LAYERS),
            final_logit_softcap=float(g.arch_get("final_logit_softcapping", 0.0)),
            rms_norm_eps=float(g.arch_get("attention.layer_norm_rms_epsilon", 1e-6)),
        )


def attn_scale(g, layers: int, layers_27b: int) -> float:
    """1/sqrt(query_pre_attn_scalar): head_dim for every size but 27B, which uses hidden / heads
    (Gemma's config.py; llama.cpp keys it on the 27B's layer count since the file does not say)."""
    if layers == layers_27b:
        return 1.0 / math.sqrt(int(require(g, "embedding_length")) // int(require(g, "attention.head_count")))
    return 0.0  # 0 = 1/sqrt(head_dim)
