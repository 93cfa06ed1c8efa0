"""Qwen3 (dense): per-head RMSNorm on q and k before rope, neox rope, no biases.

head_dim comes from `qwen3.attention.key_length` (128 on every size, not hidden / heads), which
base_config reads. A file with pooling_type 4 is a reranker (Qwen3-Reranker): hearth.models.rank_head."""

from hearth.models.rank_head import RankHead
from hearth.models.transformer import ArchSpec, CausalLM, base_config


class Qwen3ForCausalLM(CausalLM):
    spec = ArchSpec(neox_rope=True, activation="silu", qk_norm=True)
    rank_head_class = RankHead

    @classmethod
    def config_from_gguf(cls, g):
        return base_config(g)
