"""Qwen2-VL / Qwen2.5-VL's text model (llama.cpp's `qwen2vl`): Qwen2's layers with M-RoPE, each rotated pair
turning by one of a token's three positions (t, h, w), `{arch}.rope.dimension_sections` pairs each (transformers'
mrope_section, ggml's rope_multi). Text has t = h = w, so a text-only step is Qwen2's; an image's rows get their
grid's positions from the runner (hearth.media.mrope)."""

from hearth.config import ModelConfig
from hearth.errors import ModelLoadError
from hearth.models.qwen2 import Qwen2ForCausalLM
from hearth.models.transformer import base_config, require


def mrope_sections(g, cfg: ModelConfig) -> tuple[int, int, int]:
    """(t, h, w) pairs from `{arch}.rope.dimension_sections`, refused where text would not rotate as plain rope."""
    sections = [int(s) for s in require(g, "rope.dimension_sections")]  # 4 ints: t, h, w and a 4th (0 here)
    t, h, w, *rest = sections + [0] * (4 - len(sections))
    pairs = (cfg.rope_dim or cfg.head_dim) // 2
    if any(rest) or sum((t, h, w)) != pairs:
        # a 4th component (ggml's p_e) or sections not covering every pair: text would not be the base model's
        raise ModelLoadError(f"{g.path}: {g.arch}.rope.dimension_sections {sections}: hearth runs three sections "
                             f"(t, h, w) covering the {pairs} rotated pairs")
    return t, h, w


class Qwen2VLForCausalLM(Qwen2ForCausalLM):
    @classmethod
    def config_from_gguf(cls, g):
        cfg = base_config(g)
        cfg.rope_sections = mrope_sections(g, cfg)
        return cfg
