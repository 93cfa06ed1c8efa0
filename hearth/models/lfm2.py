"""LFM2 (LiquidAI, 350M-2.6B): most layers a gated short convolution (hearth.models.short_conv), the rest
GQA attention with per-head q/k RMSNorms and neox rope; a SwiGLU MLP after either. Same math as transformers'
Lfm2ForCausalLM and llama.cpp's lfm2 graph.

The file marks the conv layers with 0 in the per-layer `lfm2.attention.head_count_kv`; the conv's width is
`lfm2.shortconv.l_cache`; the final norm is `token_embd_norm` (HF's embedding_norm, which llama.cpp names so).
Files with a sliding window (llama.cpp's iswa variant) are refused."""

from hearth.errors import UnsupportedError
from hearth.models.short_conv import ShortConvLayer
from hearth.models.transformer import ArchSpec, CausalLM, base_config, require


class Lfm2ForCausalLM(CausalLM):
    spec = ArchSpec(neox_rope=True, activation="silu", qk_norm=True)
    final_norm = "token_embd_norm.weight"

    def block(self, cfg, g, i, backend, factors):
        if cfg.conv_layers[i]:
            return ShortConvLayer(cfg, self.spec, g, i, backend)
        return super().block(cfg, g, i, backend, factors)

    @classmethod
    def config_from_gguf(cls, g):
        if g.arch_get("attention.sliding_window", 0):
            raise UnsupportedError(f"{g.path}: an lfm2 file with a sliding window: not implemented")
        kv = require(g, "attention.head_count_kv")
        kv = list(kv) if isinstance(kv, list) else [int(kv)] * int(require(g, "block_count"))
        if len({k for k in kv if k}) > 1:
            raise UnsupportedError(f"{g.path}: lfm2 attention layers with different KV head counts: not implemented")
        return base_config(g, conv_layers=tuple(k == 0 for k in kv), conv_kernel=int(require(g, "shortconv.l_cache")))
