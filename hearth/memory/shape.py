"""ModelShape: the hyper-parameters the planner needs, whether they come from a GGUF's metadata, a
preset or a typed description. Nothing here knows about bytes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ModelShape:
    name: str
    arch: str
    num_layers: int
    hidden_size: int
    num_heads: int
    kv_heads: tuple[int, ...]
    """Per layer (most models: the same number repeated; some vary it by layer)."""
    head_dim_k: int
    head_dim_v: int
    ffn: int
    """Intermediate size of a dense MLP (unused when the MLP is a mixture of experts)."""
    vocab_size: int
    context_length: int
    num_experts: int = 0
    active_experts: int = 0
    expert_ffn: int = 0
    """Intermediate size of one routed expert."""
    shared_ffn: int = 0
    """Intermediate size of the always-active shared expert (0 = none)."""
    sliding_window: int = 0
    sliding: tuple[bool, ...] = ()
    """Per layer: True where the layer attends only to the last `sliding_window` tokens."""
    tied_embeddings: bool = False
    """The output head reuses token_embd (then the whole table is read for every token's logits)."""
    conv_dims: tuple[int, ...] = ()
    """Per layer: values a short-convolution layer keeps per token in the cache (lfm2: its input, hidden wide);
    0 (or empty): an attention layer."""
    conv_kernel: int = 0
    """Tokens a short convolution reads (its width)."""
    recurrent: tuple[bool, ...] = ()
    """Per layer: True where the layer is recurrent (qwen35's Gated DeltaNet): no values per token, a state per
    sequence instead (state_bytes); empty: none is."""
    state_bytes: int = 0
    """Per sequence: the recurrent layers' state slot, all of them (f32, as the runner holds it)."""
    head_dims: tuple[int, ...] = ()
    """Per layer: the head dim of its K and V where it differs by layer (gemma4: sliding 256, global 512); empty:
    head_dim_k and head_dim_v."""
    kv_shared: tuple[bool, ...] = ()
    """Per layer: True where the layer keeps no K/V (gemma4's KV-shared layers attend over an earlier layer's)."""

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def is_recurrent(self, layer: int) -> bool:
        return bool(self.recurrent) and self.recurrent[layer]

    def conv_dim(self, layer: int) -> int:
        return self.conv_dims[layer] if self.conv_dims else 0

    def head_dim(self, layer: int) -> tuple[int, int]:
        """(K's, V's) head dim in this layer."""
        return (self.head_dims[layer],) * 2 if self.head_dims else (self.head_dim_k, self.head_dim_v)

    def is_kv_shared(self, layer: int) -> bool:
        return bool(self.kv_shared) and self.kv_shared[layer]

    def is_sliding(self, layer: int) -> bool:
        return bool(self.sliding_window) and bool(self.sliding) and self.sliding[layer]

    @property
    def num_sliding(self) -> int:
        return sum(self.is_sliding(i) for i in range(self.num_layers))

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim_k

    @property
    def attn_out_dim(self) -> int:
        return self.num_heads * self.head_dim_v

    @property
    def active_ffn(self) -> int:
        """MLP width one token actually passes through (routed experts it uses + shared expert)."""
        if self.is_moe:
            return self.active_experts * self.expert_ffn + self.shared_ffn
        return self.ffn


def every_nth_global(n: int):
    """Pattern where every n-th layer is global and the rest slide (gemma3: n=6, cohere2: n=4)."""
    return lambda layers: tuple((i + 1) % n != 0 for i in range(layers))


def alternating(layers: int) -> tuple[bool, ...]:
    """Even layers slide, odd layers are global (gemma2, gpt-oss)."""
    return tuple(i % 2 == 0 for i in range(layers))


# Which layers slide, per architecture, where the GGUF does not say; same rules as llama.cpp's
# hparams and transformers' layer_types (hearth.models.gemma3 uses the gemma3 one too).
SLIDING_PATTERNS = {
    "gemma3": every_nth_global(6),
    "gemma2": alternating,
    "cohere2": every_nth_global(4),
    "olmo2": every_nth_global(4),  # OLMo 3's files with a window and no pattern array (llama.cpp's default)
    "gpt-oss": alternating,
}
