"""SmolLM3 (SmolLM3-3B): llama's block (q/k rows permuted for adjacent-pair rope) with no rope at all in every
4th layer (NoPE: layers 3, 7, 11, ...). No key in the file says so: llama.cpp's smollm3 graph hard-codes
n_no_rope_layer_step = 4 (`(il + 1) % 4 != 0` rotates), as transformers' SmolLM3Config.no_rope_layers does
by default (no_rope_layer_interval 4)."""

from hearth.models.transformer import ArchSpec, CausalLM, base_config, require

NO_ROPE_EVERY = 4


class SmolLM3ForCausalLM(CausalLM):
    spec = ArchSpec(neox_rope=False, activation="silu")

    @classmethod
    def config_from_gguf(cls, g):
        layers = int(require(g, "block_count"))
        return base_config(g, rope_layers=tuple((i + 1) % NO_ROPE_EVERY != 0 for i in range(layers)))
