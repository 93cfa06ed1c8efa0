"""Gemma 4 (text; llama.cpp's `gemma4` architecture: E2B, E4B, 31B, 26B-A4B's routed experts): Gemma 3's
block with each layer's own head dim and rope, V normed, KV-shared last layers and per-layer embeddings
(hearth.models.gemma4_layer, hearth.models.per_layer_inputs), MoE layers with a dense MLP beside the experts
(hearth.models.gemma4_moe), attention scale 1, logits soft-capped.

The file (llama.cpp's conversion/gemma.py Gemma4Model) states what Gemma 3's did not: which layers slide
(attention.sliding_window_pattern, a bool per layer), the sliding layers' head dim and rotated dims
(attention.key_length_swa, rope.dimension_count_swa), the global ones' in key_length and rope.dimension_count;
their "proportional" rope (a quarter of the pairs turn) as rope_freqs.weight, 1 on the turning pairs and 1e30 on
the others, read by the global layers alone. Norm weights are stored as they are (Gemma4RMSNorm multiplies by w,
not 1 + w: the converter's norm_shift is 0)."""

from __future__ import annotations

from dataclasses import replace

from hearth.config import is_sliding, kv_source
from hearth.errors import UnsupportedError
from hearth.models.gemma4_layer import Gemma4Layer
from hearth.models.moe import moe_config
from hearth.models.per_layer_inputs import PerLayerInputs
from hearth.models.transformer import ArchSpec, CausalLM, base_config, require

PAD_ID = 0  # Gemma's <pad>
SLIDING_ROPE_BASE = 10000.0  # transformers' default for sliding_attention where the file has no freq_base_swa


class Gemma4ForCausalLM(CausalLM):
    spec = ArchSpec(neox_rope=True, activation="gelu_tanh", qk_norm=True, sandwich_norm=True, embed_scale=True,
                    v_norm=True)
    lora_refusal = "gemma4: not yet"

    def __init__(self, cfg, g, backend, progress=None):
        if cfg.per_layer_input:
            self.spec = replace(self.spec, per_layer_input=True)
        super().__init__(cfg, g, backend, progress)
        self.per_layer = PerLayerInputs(cfg, g, backend) if cfg.per_layer_input else None
        self.kv_of = [kv_source(cfg, i) for i in range(cfg.num_layers)]  # the cache each layer attends over

    def block(self, cfg, g, i, backend, factors):
        return Gemma4Layer(cfg, self.spec, g, i, backend, factors)

    def forward(self, ids, positions, meta, kv_caches: list, out_rows: list[int] | None = None, embeds=None):
        """As CausalLM.forward, each layer given its per-layer input and the cache it attends over (a KV-shared
        layer's source's); embeds: (rows [R], values [R, hidden]) an image's rows over those token embeddings."""
        x = self.embed(ids).mul_(self.embed_scale)  # [T, hidden]
        if embeds is not None:  # unscaled, after the scale (Gemma4Model's masked_scatter)
            rows, values = embeds
            rows = rows.to(x.device)
            x.index_copy_(0, rows, values.to(x.device, x.dtype))
            # the per-layer lookup takes the pad id at an image's rows (transformers' pad_token_id, llama.cpp's
            # TAG_GEMMA4_IMG_PADDING: id 0); the projected half reads the image's rows
            ids = ids.index_fill(0, rows, PAD_ID)
        per_layer = self.per_layer(ids, x) if self.per_layer is not None else None  # [T, layers, width]
        if out_rows is not None and len(out_rows) == len(ids):
            out_rows = None
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = layer(x, positions, meta, kv_caches[self.kv_of[i]], out_rows if i == last else None,
                      None if per_layer is None else per_layer[:, i])
        return self.backend.norm(self.norm, x)

    @classmethod
    def config_from_gguf(cls, g):
        layers = int(require(g, "block_count"))
        pattern = tuple(bool(s) for s in require(g, "attention.sliding_window_pattern"))
        kv = require(g, "attention.head_count_kv")
        kv_heads = tuple(int(k) for k in kv) if isinstance(kv, list) else ()
        head_dim = int(require(g, "attention.key_length"))
        cfg = base_config(
            g,
            num_kv_heads=max(kv_heads) if kv_heads else int(kv),
            layer_kv_heads=kv_heads,
            head_dim=head_dim,
            head_dim_swa=int(g.arch_get("attention.key_length_swa", 0)),
            rope_dim_swa=int(g.arch_get("rope.dimension_count_swa", 0)),
            sliding_window=int(require(g, "attention.sliding_window")),
            sliding_window_pattern=pattern,
            rope_local_theta=float(g.arch_get("rope.freq_base_swa", SLIDING_ROPE_BASE)),
            attn_scale=1.0,  # q and k are RMS-normed: llama.cpp's f_attention_scale, transformers' scaling
            final_logit_softcap=float(g.arch_get("final_logit_softcapping", 0.0)),
            rms_norm_eps=float(g.arch_get("attention.layer_norm_rms_epsilon", 1e-6)),
            per_layer_input=int(g.arch_get("embedding_length_per_layer_input", 0)),
            kv_shared_layers=int(g.arch_get("attention.shared_kv_layers", 0)),
            **(moe_config(g, weights_norm=True) if g.arch_get("expert_count") else {}),
        )
        _check(g, cfg, layers)
        return cfg


def _check(g, cfg, layers: int) -> None:
    """One line for a file whose shape hearth would run wrong: a pattern of another length, a KV-shared layer
    with no earlier layer of its kind to read, K and V of other widths (llama.cpp refuses those too)."""
    if len(cfg.sliding_window_pattern) != layers:
        raise UnsupportedError(f"{g.path}: attention.sliding_window_pattern has {len(cfg.sliding_window_pattern)} "
                               f"entries for {layers} layers")
    first = layers - cfg.kv_shared_layers
    for i in range(first, layers):
        if not any(is_sliding(cfg, j) == is_sliding(cfg, i) for j in range(first)):
            raise UnsupportedError(f"{g.path}: KV-shared layer {i} has no earlier layer of its kind to read")
    for key, swa in (("value_length", False), ("value_length_swa", True)):
        want = (cfg.head_dim_swa if swa else 0) or cfg.head_dim
        if int(g.arch_get(f"attention.{key}", want) or want) != want:
            raise UnsupportedError(f"{g.path}: gemma4 with V heads narrower than K's: not supported")
