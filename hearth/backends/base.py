"""The backend interface, implemented in torch: the reference every other backend is tested against.

A backend is how a model's layers run on one device (DESIGN.md, style 12): the model and its layers
are built with one (hearth.models.transformer) and call it for every device-specific step; nothing in
hearth.models or hearth.layers asks which device or CPU tier it is on (tests/test_layering.py). The
decoder layer is defined once (DecoderLayer.forward); a backend says how it runs that layer's steps
(`layer_ops`), fused around its matmuls or as one call for the whole layer where it can."""

from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING

import torch

from hearth.kernels.attention import (AttentionMetadata, paged_attention_quantized_torch, paged_attention_torch,
                                      write_kv_pair_torch)
from hearth.kvstore.paged import lazy_zeros
from hearth.layers.delta_mixer import delta_mix_torch
from hearth.layers.embedding import Embedding
from hearth.layers.experts import Experts
from hearth.layers.linear import TORCH_HEAD_PATHS, QuantLinear, build_linear
from hearth.layers.norm import RMSNorm
from hearth.loader.gguf_loader import GGUFTensor

if TYPE_CHECKING:
    from hearth.layers.lora import LoraRows
    from hearth.models.arch_spec import ArchSpec
    from hearth.models.transformer import DecoderLayer


class LayerOps:
    """The steps of DecoderLayer.forward as torch ops (the slow, obvious twin of every fused form)."""

    invariant_rows = True
    """A row's bits depend on the other rows of its step only through the step's row regime
    (Backend.row_regimes); False where they do otherwise (a MoE layer's native experts)."""

    def for_rows(self, rows: int) -> LayerOps:
        """The ops that run a step of this many rows (a backend may hand some sizes to torch)."""
        return self

    def whole(self, layer: DecoderLayer, x, positions, meta, kv_cache, out_rows) -> torch.Tensor | None:
        """The whole layer in one call, or None: then step by step."""
        return None

    def norm(self, norm: RMSNorm, x: torch.Tensor) -> torch.Tensor:
        """x: [T, dim] -> RMSNorm in norm.out_dtype (the dtype of the linear it feeds)."""
        return norm(x)

    def qkv(self, layer: DecoderLayer, x: torch.Tensor) -> torch.Tensor:
        """x: the residual stream f32 [T, hidden] -> q | k | v of its norm, f32 [T, q + 2 kv]."""
        return layer.attn.qkv(self.norm(layer.attn_norm, x)).float()

    def qk_rope(self, layer: DecoderLayer, qk: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata) -> None:
        """qk: f32 [T, heads + kv_heads, head_dim], per-head normed (where the model has it) and rotated in place."""
        a = layer.attn
        if a.qk_norm is not None:
            a.qk_norm(qk, out=qk)
        a.rope(qk, positions, meta.memo.rope)

    def out_add(self, layer: DecoderLayer, attn: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """x + post_norm(attn @ W_o.T); attn: f32 [T, q_size], x: [T, hidden]."""
        o = layer.attn.o
        h = o(attn.to(o.in_dtype))
        if layer.post_attn_norm is not None:
            h = self.norm(layer.post_attn_norm, h)
        return x + h  # f32 + bf16 promotes to f32: no cast op

    def mlp_add(self, layer: DecoderLayer, x: torch.Tensor) -> torch.Tensor:
        """x + post_norm(mlp(norm(x))), into x: the dense MLP or the routed experts (hearth.models.moe)."""
        h = layer.mlp.forward(self.norm(layer.ffn_norm, x))  # .forward: no module-call overhead
        if layer.post_ffn_norm is not None:
            h = self.norm(layer.post_ffn_norm, h)
        return x.add_(h)


TORCH_OPS = LayerOps()


class ConvOps(LayerOps):
    """The steps of ShortConvLayer.forward around its conv (hearth.models.short_conv), as torch ops; its MLP is
    LayerOps.mlp_add."""

    def conv_in(self, layer, x: torch.Tensor) -> torch.Tensor:
        """x: the residual stream f32 [T, hidden] -> B | C | x of its norm, f32 [T, 3 hidden]."""
        return layer.in_proj(self.norm(layer.attn_norm, x)).float()

    def conv_out_add(self, layer, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """x + out_proj(y); y: f32 [T, hidden] (C * conv), x: [T, hidden] f32."""
        o = layer.out_proj
        return x + o(y.to(o.in_dtype))


TORCH_CONV_OPS = ConvOps()


class Backend:
    """The torch backend; other backends subclass it and override what they run faster."""

    name = "torch"
    about = "torch's CPU kernels (the reference)"
    reduced_draft_head = False
    """An unset speculative_config.draft_vocab reduces the draft's head here (where it was measured
    to pay: the native CPU backend)."""

    # ---- weights ----

    def linear(self, t: GGUFTensor | list[GGUFTensor], bias: torch.Tensor | None = None) -> QuantLinear:
        """A GGUF-block linear for few and many rows (hearth.layers.linear)."""
        return build_linear(t, bias)

    def head(self, t: GGUFTensor) -> QuantLinear:
        """The output head [vocab, hidden]: a linear whose every row is read for each token's logits (the
        torch paths hold some types otherwise there: hearth.formats.weights.HEAD_INT4_MAX_PLANES)."""
        return build_linear(t, paths=TORCH_HEAD_PATHS)

    def embedding(self, t: GGUFTensor) -> Embedding:
        return Embedding(t)

    def experts(self, gate_up: list[GGUFTensor], down: GGUFTensor, activation: str,
                biases: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None)):
        """A MoE block's routed experts over the stacked tensors [n_expert, out, in] (gate and up, or one fused
        gate|up; biases: hearth.layers.experts.Experts'): a module whose forward(h f32 [T, hidden], weights
        f32 [T, k], ids int64 [T, k]) -> f32 [T, hidden]. Here one linear per expert, op by op."""
        return Experts(self.linear, gate_up, down, activation, biases)

    # ---- the decoder layer ----

    def layer_ops(self, layer: DecoderLayer, spec: ArchSpec) -> LayerOps:
        """How this backend runs `layer` (built: its weights are in place)."""
        return TORCH_OPS

    def conv_ops(self, layer) -> ConvOps:
        """The ops of a short-conv layer (hearth.models.short_conv: its linears, norms and MLP; the conv itself is
        torch's)."""
        return TORCH_CONV_OPS

    def delta_mixer(self, layer):
        """How a Gated DeltaNet layer (hearth.models.delta_net) runs between its in_proj and out_proj: a callable
        (layer, qkv, z, beta, alpha, meta) -> [T, v_heads * v_dim], here torch's (hearth.layers.delta_mixer)."""
        return delta_mix_torch

    def stack(self, layers: list[DecoderLayer]):
        """Something with run(x, positions, meta, kv_caches, out_rows) -> (layers run, x after them:
        out_rows' rows when every layer ran), that takes a step through many layers in one call; None."""
        return None

    def lora_stack(self, stack, layers: list[DecoderLayer], rows: LoraRows):
        """Like `stack` (the model's, or None), for the steps where a LoRA adapter is on: layers whose
        linears were wrapped in LoraLinear (hearth.models.lora), rows the step's scales; None: op by op."""
        return None

    def norm(self, norm: RMSNorm, x: torch.Tensor) -> torch.Tensor:
        """The model's final norm: x f32 [T, hidden] -> f32."""
        return norm(x)

    def kv_zeros(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A layer's KV tensor, zero: f16/bf16 pages, or a quantized cache's codec fields and f16 staging
        (on the host: resident only where written)."""
        return lazy_zeros(shape, dtype)

    def kv_refusal(self, codec) -> str | None:
        """Why this backend cannot hold a KV cache in this codec (hearth.kvstore.codecs), as "no ... yet: ...",
        or None: asked before the model loads."""
        return None

    def write_kv(self, kv_cache, kv: torch.Tensor, meta: AttentionMetadata) -> None:
        """kv: f32 [T, 2, kv_heads, head_dim] -> the new tokens' cache slots."""
        write_kv_pair_torch(kv_cache, kv, meta)

    def attention(self, q: torch.Tensor, kv_cache, meta: AttentionMetadata, scale: float, window: int,
                  softcap: float, precise: bool, sinks: torch.Tensor | None = None) -> torch.Tensor:
        """q: f32 [T, heads, head_dim] over the paged cache -> [T, heads, head_dim] (causal, sliding
        window, soft-cap, tree masks). precise: long chunks' scores in f32 (kernels.attention.PRECISE_SCORES);
        sinks: f32 [heads], a logit per head in the softmax's denominator (gpt-oss)."""
        if isinstance(kv_cache, torch.Tensor):
            return paged_attention_torch(q, kv_cache, meta, scale, window, softcap, sinks)
        return paged_attention_quantized_torch(q, kv_cache, meta, scale, window, softcap, sinks)

    def full_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
        """One sequence's bidirectional attention (a vision tower's: every row sees every row).
        q, k, v: [N, heads, head_dim] in one dtype (bf16 or f32) -> [N, heads, head_dim] in that dtype."""
        # [1, heads, N, d]: 4-d, so torch takes its fused CPU kernel (3-d falls back to the math one)
        out = torch.nn.functional.scaled_dot_product_attention(*(t.transpose(0, 1)[None] for t in (q, k, v)),
                                                               scale=scale)
        return out[0].transpose(0, 1)

    def logits(self, head: QuantLinear, hidden: torch.Tensor, ids: torch.Tensor | None = None) -> torch.Tensor:
        """hidden: f32 [N, hidden] -> [N, vocab], or with ids [M] only those columns: [N, M], each
        value bit for bit the whole head's (a backend computes fewer rows where it can)."""
        logits = head(hidden.to(head.in_dtype)).float()
        return logits if ids is None else logits[:, ids]

    # ---- the step ----

    def metadata(self, query_start_loc: list[int], seq_lens: list[int], block_tables: list[list[int]],
                 slots: list[int], block_size: int, trees: dict | None = None) -> AttentionMetadata:
        """The step's attention metadata, shared by every layer."""
        return AttentionMetadata(query_start_loc, seq_lens, block_tables, torch.tensor(slots, dtype=torch.long),
                                 block_size, trees=trees or {})

    def row_regimes(self, model, quantized_kv: bool) -> tuple[int, ...] | None:
        """Step sizes (rows) from which the kernels sum differently, so a row's bits may change across
        them; None when even 1 + k rows of one sequence differ from a 1-row decode (torch's kernels:
        measured 0.25-0.6 on SmolLM2's logits), so drafts would not be lossless. quantized_kv: the KV
        cache's codec encodes blocks (known before the cache exists, so the engine decides before a
        draft model loads)."""
        return None

    def batch_min_rows(self) -> int:
        """Rows from which a step's matmuls take the batch GEMMs (0: none)."""
        return 0

    def row_passes(self) -> tuple[int, int, int]:
        """(first, rows, tail) of a verify step's matmul passes (hearth.spec_decode.cost.StepCost.passes):
        (0, 0, 0) where none are known."""
        return (0, 0, 0)

    def batch_invariant(self, rows: int):
        """A context in which steps of up to `rows` rows sum every matmul row as a 1-row step does."""
        return nullcontext()
