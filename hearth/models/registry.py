"""general.architecture -> model class. One line per architecture."""

from __future__ import annotations

import importlib

from hearth.config import RopeScaling
from hearth.errors import UnsupportedError
from hearth.loader.gguf_loader import GGUFFile

ARCHITECTURES: dict[str, str] = {
    "llama": "hearth.models.llama:LlamaForCausalLM",
    "phi3": "hearth.models.phi3:Phi3ForCausalLM",
    "qwen2": "hearth.models.qwen2:Qwen2ForCausalLM",
    "qwen2vl": "hearth.models.qwen2vl:Qwen2VLForCausalLM",
    "qwen3": "hearth.models.qwen3:Qwen3ForCausalLM",
    "qwen3vl": "hearth.models.qwen3vl:Qwen3VLForCausalLM",
    "qwen3moe": "hearth.models.qwen3moe:Qwen3MoeForCausalLM",
    "gemma2": "hearth.models.gemma2:Gemma2ForCausalLM",
    "gemma3": "hearth.models.gemma3:Gemma3ForCausalLM",
    "gemma4": "hearth.models.gemma4:Gemma4ForCausalLM",
    "gpt-oss": "hearth.models.gpt_oss:GptOssForCausalLM",
    "granite": "hearth.models.granite:GraniteForCausalLM",
    "granitemoe": "hearth.models.granite:GraniteMoeForCausalLM",
    "smollm3": "hearth.models.smollm3:SmolLM3ForCausalLM",
    "olmo2": "hearth.models.olmo2:Olmo2ForCausalLM",
    "mistral3": "hearth.models.mistral3:Mistral3ForCausalLM",
    "lfm2": "hearth.models.lfm2:Lfm2ForCausalLM",
    "qwen35": "hearth.models.qwen35:Qwen35ForCausalLM",
    "qwen35moe": "hearth.models.qwen35:Qwen35MoeForCausalLM",
    # encoders: embeddings only (hearth.models.encoder)
    "bert": "hearth.models.bert:BertModel",
    "nomic-bert": "hearth.models.nomic_bert:NomicBertModel",
}


def model_class(arch: str):
    try:
        module, name = ARCHITECTURES[arch].split(":")
    except KeyError:
        supported = ", ".join(sorted(ARCHITECTURES))
        raise UnsupportedError(f"unsupported architecture {arch!r}; hearth supports: {supported}") from None
    return getattr(importlib.import_module(module), name)


def embeds_only(arch: str) -> bool:
    """An encoder architecture (hearth.models.encoder): embeddings only, no KV cache."""
    return arch in ARCHITECTURES and getattr(model_class(arch), "embeds_only", False)


def model_config(g: GGUFFile):
    """The file's ModelConfig, from its header. A decoder whose pooling_type is 4 (rank) is a reranker where its
    architecture has a rank head, whose tensor the header must show right (hearth.models.rank_head); elsewhere
    it is refused: served as a chat model it would answer text, not scores."""
    cls = model_class(g.arch)
    cfg = cls.config_from_gguf(g)
    if cfg.pooling == "rank" and not getattr(cls, "embeds_only", False):
        head = getattr(cls, "rank_head_class", None)
        if head is None:
            rankers = ", ".join(a for a in ARCHITECTURES if getattr(model_class(a), "rank_head_class", None))
            raise UnsupportedError(f"{g.path}: a decoder reranker ({g.arch} with pooling_type 4, rank) is not "
                                   f"supported; hearth reranks with {rankers} decoders (Qwen3-Reranker) and BERT "
                                   "cross-encoders")
        head.check(g, cfg.hidden_size)
    return cfg


def load_model(g: GGUFFile, backend, progress=None, rope_scaling: RopeScaling | None = None,
               rope_freq_base: float = 0.0):
    """Build the model for a GGUF file on a backend (hearth.backends.select) -> (model, ModelConfig);
    rope_scaling, rope_freq_base (0: none): the engine's, over the file's."""
    cls = model_class(g.arch)
    cfg = model_config(g)
    for flag, given in (("--rope-scaling", rope_scaling is not None), ("--rope-freq-base", bool(rope_freq_base))):
        if given and getattr(cls, "embeds_only", False):  # its positions are a table or unscaled
            raise UnsupportedError(f"{flag}: {g.arch} is an embedding model; rope settings apply to decoder models")
    from hearth.models.transformer import with_rope_base, with_rope_scaling
    if rope_freq_base:
        cfg = with_rope_base(cfg, rope_freq_base)
    if rope_scaling is not None:
        cfg = with_rope_scaling(cfg, rope_scaling)
    return cls(cfg, g, backend, progress=progress).eval(), cfg
