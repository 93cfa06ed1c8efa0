"""Memory beyond weights and KV: activations of one engine step, and the fixed runtime cost.

Activations (freed and reused every step; the peak is what counts): a step runs at most
`batch_tokens` tokens (the engine's max_num_batched_tokens, 2048 by default) and never more than
ctx x concurrency. Inside one layer these are live at once, per token, in the device's activation
dtype (f32 on CPU):
  residual + normed input + attention output + MLP output   4 x hidden
  fused q|k|v projection and its rotated copy                2 x (q_dim + 2 x kv_dim)
  MLP gate|up, activation, product                           4 x active ffn width
Attention scores are not counted: attention runs fused (SDPA / flash), never as a [T, ctx] matrix.
Logits: every sequence samples from its own f32 row of `vocab` values, held three times (logits,
processed copy, log-softmax).

Tokenizer: the vocabulary as hearth's tokenizer (Hugging Face `tokenizers`) holds it, measured at
550-680 bytes an entry on SmolLM2's 49K and gemma3's 262K vocabularies; it lives in host memory."""

from __future__ import annotations

from hearth.memory.shape import ModelShape

LOGIT_COPIES = 3
TOKENIZER_BYTES_PER_ENTRY = 640
DEFAULT_BATCH_TOKENS = 2048  # EngineConfig.max_num_batched_tokens


def activation_values_per_token(shape: ModelShape) -> int:
    kv_dim = max(shape.kv_heads) * (shape.head_dim_k + shape.head_dim_v) // 2
    return 4 * shape.hidden_size + 2 * (shape.q_dim + 2 * kv_dim) + 4 * shape.active_ffn


def step_tokens(ctx: int, concurrency: int, batch_tokens: int) -> int:
    return min(batch_tokens, ctx * concurrency)


def activation_bytes(shape: ModelShape, act_bytes: int, ctx: int, concurrency: int, batch_tokens: int) -> int:
    hidden = step_tokens(ctx, concurrency, batch_tokens) * activation_values_per_token(shape) * act_bytes
    return hidden + logits_bytes(shape, concurrency)


def logits_bytes(shape: ModelShape, concurrency: int) -> int:
    return concurrency * shape.vocab_size * 4 * LOGIT_COPIES


def tokenizer_bytes(shape: ModelShape) -> int:
    return shape.vocab_size * TOKENIZER_BYTES_PER_ENTRY
