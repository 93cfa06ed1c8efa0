"""Gemma 2: Gemma 3's block without q/k norms, with tanh soft-capping of the attention scores and of
the logits, every other layer sliding-window (the first one sliding: llama.cpp's swa pattern 2,
transformers' layer_types), one rope base for all layers.

Norm weights need no +1 (the converter adds it, as for Gemma 3)."""

from hearth.models.gemma3 import attn_scale
from hearth.models.transformer import ArchSpec, CausalLM, base_config, require

SLIDING_EVERY = 2
GEMMA2_27B_LAYERS = 46


class Gemma2ForCausalLM(CausalLM):
    spec = ArchSpec(neox_rope=True, activation="gelu_tanh", sandwich_norm=True, embed_scale=True)

    @classmethod
    def config_from_gguf(cls, g):
        layers = int(require(g, "block_count"))
        window = int(g.arch_get("attention.sliding_window", 0))
        pattern = tuple(i % SLIDING_EVERY == 0 for i in range(layers)) if window else ()
        return base_config(
            g,
            sliding_window=window,
            sliding_window_pattern=pattern,
            attn_scale=attn_scale(g, layers, GEMMA2_27B_LAYERS),
            attn_logit_softcap=float(g.arch_get("attn_logit_softcapping", 0.0)),
            final_logit_softcap=float(g.arch_get("final_logit_softcapping", 0.0)),
            rms_norm_eps=float(g.arch_get("attention.layer_norm_rms_epsilon", 1e-6)),
        )
