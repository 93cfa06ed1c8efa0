"""IBM Granite 3.x (dense `granite`, and `granitemoe` with routed experts): llama's block (q/k rows permuted for
adjacent-pair rope) and four scalars from the file, as llama.cpp's granite graph and transformers'
GraniteForCausalLM use them: embeddings times `embedding_scale`, attention and MLP outputs times
`residual_scale` before each residual add, softmax scale `attention.scale` (not 1/sqrt(head_dim)), logits
divided by `logit_scale` (hearth.models.transformer.CausalLM folds it into the final norm's weight).

The residual scale r runs as a rescaled residual stream z = x / r: every reader of the stream is an RMSNorm,
and rmsnorm(r z; eps) = rmsnorm(z; eps / r^2) exactly, so z's layers are llama's own (z + attn(norm(z)), ...)
from embeddings times embedding_scale / r, with each norm's eps / r^2: the fused C++ layer runs it as it
runs llama. Granite MoE files with shared experts (ffn_*_shexp, granitemoeshared) are refused."""

from hearth.errors import UnsupportedError
from hearth.models.moe import moe_config
from hearth.models.transformer import ArchSpec, CausalLM, base_config

SCALES = {"embedding_scale": 1.0, "residual_scale": 1.0, "attention.scale": 0.0, "logit_scale": 1.0}
"""The file's `granite.*` scalars -> their values where a key is absent (llama.cpp's: 0 = 1/sqrt(head_dim))."""


def granite_config(g, **overrides):
    s = {key: float(g.arch_get(key, default)) for key, default in SCALES.items()}
    r = s["residual_scale"]
    eps = float(g.arch_get("attention.layer_norm_rms_epsilon", 1e-5))
    return base_config(g, embedding_scale=s["embedding_scale"] / r, rms_norm_eps=eps / r**2,
                       attn_scale=s["attention.scale"], logit_scale=s["logit_scale"], **overrides)


class GraniteForCausalLM(CausalLM):
    spec = ArchSpec(neox_rope=False, activation="silu")

    @classmethod
    def config_from_gguf(cls, g):
        return granite_config(g)


class GraniteMoeForCausalLM(CausalLM):
    """Granite 3.x MoE: the router's softmax over the top-k logits (= softmax, top-k, renormalized: llama.cpp's
    norm_w for granitemoe), each expert a SwiGLU."""

    spec = ArchSpec(neox_rope=False, activation="silu", moe=True)

    @classmethod
    def config_from_gguf(cls, g):
        if "blk.0.ffn_gate_shexp.weight" in g.tensors:
            raise UnsupportedError(f"{g.path}: a granitemoe file with shared experts (ffn_*_shexp): not implemented")
        return granite_config(g, **moe_config(g, weights_norm=True))
