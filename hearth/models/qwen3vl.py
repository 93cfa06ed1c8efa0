"""Qwen3-VL's text model (llama.cpp's `qwen3vl`; dense 2B/4B/8B): Qwen3's layers with interleaved M-RoPE (pair j
turns by t, h, w in turn: hearth.layers.rotary.interleaved) and deepstack: an image row carries
`{arch}.n_deepstack_layers` more parts of the LM's width, part i added to the hidden state at that row after layer
i - 1 (CausalLM.forward; transformers' _deepstack_process, llama.cpp's qwen3vl.cpp). Text has t = h = w and no
parts, so a text-only step is Qwen3's."""

from hearth.errors import ModelLoadError
from hearth.models.qwen2vl import mrope_sections
from hearth.models.qwen3 import Qwen3ForCausalLM
from hearth.models.transformer import base_config


class Qwen3VLForCausalLM(Qwen3ForCausalLM):
    @classmethod
    def config_from_gguf(cls, g):
        cfg = base_config(g, rope_layout="interleaved")
        cfg.rope_sections = mrope_sections(g, cfg)
        cfg.deepstack_layers = int(g.arch_get("n_deepstack_layers", 0))
        if not 0 <= cfg.deepstack_layers < cfg.num_layers:  # the last layer's rows past attention are the sampled ones
            raise ModelLoadError(f"{g.path}: {g.arch}.n_deepstack_layers {cfg.deepstack_layers}: hearth adds deepstack "
                                 f"parts after layers 0 .. {cfg.num_layers - 2} of its {cfg.num_layers}")
        return cfg
