"""The CPU backend: hearth's C++ kernels at the tier this CPU runs (hearth.kernels.tiers), torch's
where a kernel is missing (the torch backend's code, hearth.backends.base).

The decoder layer's steps run in 5 C++ calls plus attention: norms, activation, rope and residual adds
fused around the native matmuls (8-bit activations for a few rows, bf16 tiles or the C++ GEMMs for
prefill chunks), ~30 torch ops fewer per layer; a step of a few rows, or one sequence's prefill chunk,
runs the whole layer in one call (hearth.kernels.fused_layer), and a prefill chunk can go through every
layer in one call (FusedStack). A MoE layer's experts are one native call over the stacked tensors
(hearth.backends.cpu_experts), its other steps native in parts (NativeMoeLayerOps)."""

from __future__ import annotations

import contextlib

import torch

from hearth.backends.base import TORCH_CONV_OPS, TORCH_OPS, Backend, ConvOps, LayerOps
from hearth.backends.cpu_delta_net import delta_mix_native
from hearth.backends.cpu_experts import NativeExperts
from hearth.backends.cpu_full_attention import full_attention_native
from hearth.backends.cpu_linear import native_linear, native_part
from hearth.backends.cpu_lora import native_lora_stack
from hearth.kernels import native, tiers
from hearth.kernels.attention import AttentionMetadata, paged_attention, write_kv_pair
from hearth.kernels.fused_layer import FusedLayer, FusedStack
from hearth.layers.embedding import Embedding
from hearth.layers.linear import QuantLinear, linear_policy
from hearth.layers.norm import RMSNorm, WholeQKNorm
from hearth.loader.gguf_loader import GGUFTensor
from hearth.models.arch_spec import ArchSpec, admits, refusal


NO_CHANGE = contextlib.nullcontext()
"""batch_invariant(0): steps without drafts change nothing (a nullcontext is reusable)."""


class NativeEmbedding(Embedding):
    """Rows dequantized by one C++ call per lookup (bit-exact like the torch decoder)."""

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # ids: [T] int64 -> [T, hidden] f32
        rows = native.dequant_rows(self.raw, self.qtype, self.embedding_dim, ids)
        return rows if ids.dim() == 1 else rows.view(*ids.shape, -1)


def _norm_args(norm: RMSNorm | None) -> tuple[torch.Tensor | None, float]:
    """(weight, eps) as the C++ layer takes a norm the architecture may lack: (None, 0.0)."""
    return (None, 0.0) if norm is None else (norm.weight, norm.eps)


def _kept_tail(out_rows: list[int] | None, T: int) -> int | None:
    """How many rows go on past a fused prefill: all T, or len(out_rows) when they are the last rows
    in order; None when they are not (the fused calls only keep a tail)."""
    keep = T if out_rows is None else len(out_rows)
    return keep if out_rows is None or out_rows == list(range(T - keep, T)) else None


def uncovered_heads(model) -> list[tuple[int, int, int]]:
    """The (heads, kv_heads, head_dim) of the model's attention layers the native paged attention does not
    take (their attention runs torch's, whose rows sum by the step's rows: no lossless verify rows)."""
    shapes = {(a.heads, a.kv_heads, a.head_dim) for layer in model.layers
              if (a := getattr(layer, "attn", None)) is not None and getattr(a, "head_dim", 0)}
    return sorted(s for s in shapes if not native.paged_attention_covers(*s))


def _native_linears(layer) -> bool:
    """A layer on torch's ops (qwen35's gated attention) sums a row as a decode row only where its linears are
    native (torch's matmuls sum by the step's rows); any other layer's ops say so themselves (invariant_rows)."""
    if type(layer.ops) is not LayerOps:
        return True
    lins = (layer.attn.qkv, layer.attn.o, getattr(layer.mlp, "gate_up", None), getattr(layer.mlp, "down", None))
    return all(lin is not None and native_part(lin) for lin in lins)


class NativeLayerOps(LayerOps):
    """A layer whose four linears are each one NativePart: its steps fused around them in C++. With
    ArchSpec.attn_temperature the whole-layer call (which forms the queries itself, unscaled) runs only steps
    whose positions are all within the original context, where the factor is 1; past it, the parts, the
    queries scaled between them (DecoderLayer.forward)."""

    NAME, IMPLEMENTS = FusedLayer.NAME, {**FusedLayer.IMPLEMENTS, "attn_temperature": None}
    fused_until: int | None = None
    """The longest sequence the fused calls run (None: any): a query temperature's original context."""

    @staticmethod
    def linears(layer) -> tuple[QuantLinear, ...]:
        return layer.attn.qkv, layer.attn.o, layer.mlp.gate_up, layer.mlp.down

    def __init__(self, layer, spec: ArchSpec):
        self.mms = tuple(native_part(lin).mm for lin in self.linears(layer))  # qkv, o, gate_up, down
        self.max_rows = native_part(layer.attn.qkv).gemm_min_rows
        """Steps below this many rows are decode-sized (the GEMV, or the batch GEMMs)."""
        self.fused = _fused(layer, self.mms, spec) if native.has("layer") else None
        if layer.attn.temperature is not None:
            self.fused_until = layer.attn.temperature.floor_scale
        self.rope, self.precise = layer.attn.rope, layer.attn.precise_scores  # read every step: no module lookups

    def for_rows(self, rows: int) -> LayerOps:
        # every row count where the library has prefill GEMMs (AMX bf16 tiles, the C++ GEMMs without AMX,
        # the avx2 library's int8 GEMM); the neon library's GEMV takes decode-sized steps only, prefills
        # go to dense tiles in torch
        return self if rows < self.max_rows or native.has("gemm") or native.has("many_rows") else TORCH_OPS

    def whole(self, layer, x, positions, meta, kv_cache, out_rows):
        """A step of a few rows, or one sequence's prefill chunk (which, when out_rows are its last
        rows, computes no others past the K/V), in one call; None where it does not cover the step."""
        if self.fused is None or meta.bidirectional:  # its attention is causal only: the ops, torch's attention
            return None
        if self.fused_until is not None and max(meta.seq_lens) > self.fused_until:  # a query temperature not 1
            return None
        T, keep = x.shape[0], _kept_tail(out_rows, x.shape[0])
        cos, sin = self.rope.halves(positions, meta.memo.rope)
        if T < self.max_rows:
            if self.fused(x, cos, sin, kv_cache, meta):
                return x if out_rows is None else x[out_rows]
        elif keep is not None and not self.precise and self.fused.prefill(x, cos, sin, kv_cache, meta, keep):
            return x if keep == T else x[T - keep:]
        return None

    def qkv(self, layer, x):
        n = layer.attn_norm
        return self.mms[0](x, norm=n.weight, eps=n.eps, bias=layer.attn.qkv.bias)

    def qk_rope(self, layer, qk, positions, meta):
        a = layer.attn
        cos, sin = a.rope.halves(positions, meta.memo.rope)
        norm = a.qk_norm
        if isinstance(norm, WholeQKNorm):  # q's heads as one head, then k's: normed only (rot 0), then rotated
            for part, n in ((qk[:, :a.heads], norm.q), (qk[:, a.heads:], norm.k)):
                native.qk_rope(part.view(part.shape[0], 1, -1), 0, cos, sin, a.rope.neox, n.weight, n.eps)
            norm = None
        native.qk_rope(qk, a.rope.rot_dim, cos, sin, a.rope.neox, *_norm_args(norm))

    def out_add(self, layer, attn, x):
        self.mms[1].add_to(attn, x, *_norm_args(layer.post_attn_norm))
        return x

    def mlp_add(self, layer, x):
        return native.mlp_add_to(self.mms[2], self.mms[3], layer.mlp.activation, x, *_norm_args(layer.ffn_norm),
                                 *_norm_args(layer.post_ffn_norm))


class NativeLayerParts(NativeLayerOps):
    """NativeLayerOps' steps without the whole-layer call or the stack: for a layer whose forward does more
    between them than the fused C++ layer implements (gemma4's V norm and per-layer input, hearth.models.
    gemma4_layer; qwen35's output gate, hearth.models.qwen35.GatedAttentionLayer), which it runs in torch around
    these native steps (every one of them row-invariant)."""

    NAME = "the native layer's steps"
    IMPLEMENTS = {**NativeLayerOps.IMPLEMENTS, "v_norm": None, "per_layer_input": None, "attn_output_gate": None}

    def __init__(self, layer, spec: ArchSpec):
        self.mms = tuple(native_part(lin).mm for lin in self.linears(layer))  # qkv, o, gate_up, down
        self.max_rows = native_part(layer.attn.qkv).gemm_min_rows
        self.fused, self.rope, self.precise = None, layer.attn.rope, layer.attn.precise_scores


class NativeConvOps(ConvOps):
    """A short-conv layer (hearth.models.short_conv) whose four linears are each one NativePart: its norm fused
    into in_proj's matmul, out_proj's added into the stream, the MLP one call as an attention layer's; the conv
    between them torch's."""

    @staticmethod
    def linears(layer) -> tuple[QuantLinear, ...]:
        return layer.in_proj, layer.out_proj, layer.mlp.gate_up, layer.mlp.down

    def __init__(self, layer):
        self.mms = tuple(native_part(lin).mm for lin in self.linears(layer))  # in_proj, out_proj, gate_up, down
        self.max_rows = native_part(layer.in_proj).gemm_min_rows

    def for_rows(self, rows: int) -> LayerOps:  # as NativeLayerOps'
        return self if rows < self.max_rows or native.has("gemm") or native.has("many_rows") else TORCH_CONV_OPS

    def conv_in(self, layer, x):
        n = layer.attn_norm
        return self.mms[0](x, norm=n.weight, eps=n.eps)

    def conv_out_add(self, layer, y, x):
        return self.mms[1].add_to(y, x.contiguous())

    def mlp_add(self, layer, x):
        return native.mlp_add_to(self.mms[2], self.mms[3], layer.mlp.activation, x, *_norm_args(layer.ffn_norm),
                                 *_norm_args(None))


class NativeMoeLayerOps(NativeLayerOps):
    """A MoE layer whose experts are NativeExperts: attention's steps fused around its native linears as a
    dense layer's, the experts one native call after torch's norm and routing (LayerOps.mlp_add); no
    whole-layer call (the fused C++ layer refuses ArchSpec.moe), so no one-call stack either."""

    NAME = "the native MoE layer in parts"
    IMPLEMENTS = {**FusedLayer.IMPLEMENTS, "moe": (True,)}
    invariant_rows = False
    """An expert's rows take the GEMV or the batch GEMMs by how many rows of the step chose it."""

    @staticmethod
    def linears(layer) -> tuple[QuantLinear, ...]:
        return layer.attn.qkv, layer.attn.o

    def __init__(self, layer, spec: ArchSpec):
        self.mms = tuple(native_part(lin).mm for lin in self.linears(layer))  # qkv, o
        self.max_rows = native_part(layer.attn.qkv).gemm_min_rows
        self.fused, self.rope, self.precise = None, layer.attn.rope, layer.attn.precise_scores

    mlp_add = LayerOps.mlp_add


def _fused(layer, mms, spec: ArchSpec) -> FusedLayer:
    a, n, e = layer.attn, (lambda norm: _norm_args(norm)[0]), (lambda norm: _norm_args(norm)[1])
    norms = [n(layer.attn_norm), a.qkv.bias, n(a.qk_norm), n(layer.post_attn_norm), n(layer.ffn_norm),
             n(layer.post_ffn_norm)]
    eps = [e(layer.attn_norm), e(a.qk_norm), e(layer.post_attn_norm), e(layer.ffn_norm), e(layer.post_ffn_norm)]
    return FusedLayer(mms, norms, eps, spec.activation, a.rope.neox, a.heads, a.kv_heads, a.head_dim, a.rope.rot_dim,
                      a.window, a.scale, a.softcap or 0.0, qk_whole=isinstance(a.qk_norm, WholeQKNorm))


class NativeStack:
    """Every layer in one C++ call (FusedStack): a decode step of a few rows, or one sequence's prefill
    chunk (on the bf16 tile attention: not for layers that need f32 scores)."""

    def __init__(self, layers):
        self.layers, self.min_rows = layers, layers[0].ops.max_rows
        # a layer given other ops (or none fused) after the model's build runs them, not the stack
        self.ops = [(layer.ops, layer.ops.fused) for layer in layers]
        ropes = {layer.attn.rope.key: layer.attn.rope for layer in layers}  # one per configuration
        self.ropes, keys = list(ropes.values()), list(ropes)
        self.rope_of = [keys.index(layer.attn.rope.key) for layer in layers]
        self.fused = FusedStack([layer.ops.fused for layer in layers])
        self.tile_prefill = not any(layer.attn.precise_scores for layer in layers)
        untils = [layer.ops.fused_until for layer in layers if layer.ops.fused_until is not None]
        self.fused_until = min(untils) if untils else None  # a query temperature's original context

    def run(self, x, positions, meta, kv_caches, out_rows) -> tuple[int, torch.Tensor]:
        """(how many layers one call ran, x after them: every row, or out_rows' when all ran). Decode-
        sized steps run every row; a prefill chunk long enough for the bf16 tiles, when the rows going
        on are its last ones, computes only those past the K/V; (0, x) where neither applies."""
        T = x.shape[0]
        if not self.covers(meta):
            return 0, x
        if T < self.min_rows:
            done = self.fused.decode(x, self._tables(positions, meta), kv_caches, meta)
            return done, (x if out_rows is None or done < len(self.layers) else x[out_rows])
        keep = _kept_tail(out_rows, T)
        if keep is None or not self.tile_prefill:
            return 0, x
        done = self.fused.prefill(x, self._tables(positions, meta), kv_caches, meta, keep)
        return done, (x[T - keep:] if done == len(self.layers) else x)

    def covers(self, meta) -> bool:
        """Its layers as built, a causal step (its attention is causal only), and every position within a query
        temperature's original context (past it the layers scale their queries op by op)."""
        if not self.intact() or meta.bidirectional:
            return False
        return self.fused_until is None or max(meta.seq_lens) <= self.fused_until

    def intact(self) -> bool:
        """Every layer still has the ops (and fused layer) it was built with."""
        return all(layer.ops is ops and ops.fused is fused for layer, (ops, fused) in zip(self.layers, self.ops))

    def _tables(self, positions, meta) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(cos, sin) per layer, looked up once per rope configuration."""
        halves = [rope.halves(positions, meta.memo.rope) for rope in self.ropes]
        return [halves[i] for i in self.rope_of]


class CpuBackend(Backend):
    name = "cpu"
    reduced_draft_head = True

    def __init__(self, tier: tiers.Tier):
        self.tier, self.about = tier, f"{tier.name} tier: {tier.enables}"

    def linear(self, t: GGUFTensor | list[GGUFTensor], bias: torch.Tensor | None = None) -> QuantLinear:
        return native_linear(t, bias)

    def head(self, t: GGUFTensor) -> QuantLinear:
        return native_linear(t)

    def embedding(self, t: GGUFTensor) -> Embedding:
        return NativeEmbedding(t) if int(t.qtype) in native.qtypes() else Embedding(t)

    def experts(self, gate_up: list[GGUFTensor], down: GGUFTensor, activation: str,
                biases: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None)):
        """Two native plans over the stacked tensors, one call per block (NativeExperts), where the
        library has hk_moe and reads all three types, and the block has separate gate and up tensors, no
        biases and an activation hk_moe knows (not gpt-oss's); else one linear per expert (the torch backend's)."""
        policy = linear_policy()
        if (not native.has("moe") or policy.exact or activation not in native.ACTIVATIONS or len(gate_up) != 2
                or any(b is not None for b in biases)
                or any(int(t.qtype) not in native.qtypes() for t in (*gate_up, down))):
            return super().experts(gate_up, down, activation, biases)
        return NativeExperts(*gate_up, down, activation, policy.native_gemm_min_rows)

    def layer_ops(self, layer, spec: ArchSpec) -> LayerOps:
        """NativeLayerOps when each of the layer's linears is one NativePart, the C++ layer implements
        every ArchSpec field the model sets (else the reason is logged once) and the library has the
        ops around the GEMV (a MoE layer with native experts: NativeMoeLayerOps, its attention's linears
        alone); else the torch ops (over the same native linears)."""
        moe = isinstance(getattr(layer.mlp, "experts", None), NativeExperts)
        kind = NativeMoeLayerOps if moe else NativeLayerOps
        if not moe and refusal(kind.NAME, kind.IMPLEMENTS, spec) and not refusal(NativeLayerParts.NAME,
                                                                                  NativeLayerParts.IMPLEMENTS, spec):
            kind = NativeLayerParts  # the whole-layer call refuses the block, its steps do not
        if not admits(kind.NAME, kind.IMPLEMENTS, spec):  # first: a MoE layer has no gate_up
            return TORCH_OPS
        lins = kind.linears(layer)
        if (not all(native_part(lin) for lin in lins) or any(lin.bias is not None for lin in lins[1:])
                or not native.has("fused_ops")):
            return TORCH_OPS
        return kind(layer, spec)

    def conv_ops(self, layer) -> ConvOps:
        """NativeConvOps where each of the layer's linears is one NativePart and the library has the fused ops
        (its rows then invariant within a row regime: the conv's sums are elementwise, in one order whatever the
        rows); else torch's ops, whose rows are not (row_regimes: None)."""
        dense = hasattr(layer.mlp, "gate_up")  # not routed experts (qwen35moe's DeltaNet layers): torch's MLP step
        if dense and all(native_part(lin) for lin in NativeConvOps.linears(layer)) and native.has("fused_ops"):
            return NativeConvOps(layer)
        ops = ConvOps()
        ops.invariant_rows = False
        return ops

    def delta_mixer(self, layer):
        """One native call (hearth.backends.cpu_delta_net) where the library has it; else torch's."""
        return delta_mix_native if native.has("delta_net") else super().delta_mixer(layer)

    def stack(self, layers):
        if all(isinstance(layer.ops, NativeLayerOps) and layer.ops.fused is not None for layer in layers):
            return NativeStack(layers)
        return None

    def lora_stack(self, stack, layers, rows):
        """The decode stack with the adapters' terms in its C++ layers (NativeLoraStack), where the model
        has the stack and the library the terms."""
        if not isinstance(stack, NativeStack) or not native.has("lora"):
            return None
        # csrc/lora_layer.h norms q and k per head: olmo2's whole projections stay op by op
        if any(isinstance(layer.attn.qk_norm, WholeQKNorm) for layer in layers):
            return None
        return native_lora_stack(stack, layers, rows)

    def write_kv(self, kv_cache, kv: torch.Tensor, meta: AttentionMetadata) -> None:
        write_kv_pair(kv_cache, kv, meta)

    def attention(self, q, kv_cache, meta, scale, window, softcap, precise, sinks=None):
        return paged_attention(q, kv_cache, meta, scale, window, softcap, precise, sinks)  # sinks: the torch paths

    def full_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
        """bf16 rows on the native flash kernel where it runs (hearth.backends.cpu_full_attention: 2x torch's
        SDPA at head dim 64, 1.25x at 72 padded to 96, one thread); f32 rows (an exact or f32 tower) keep torch's."""
        if q.dtype == torch.bfloat16 and (out := full_attention_native(q, k, v, scale)) is not None:
            return out.to(q.dtype)
        return super().full_attention(q, k, v, scale)

    def logits(self, head: QuantLinear, hidden: torch.Tensor, ids: torch.Tensor | None = None) -> torch.Tensor:
        part = native_part(head)  # f32 in, f32 out (also from its bf16 tiles): no cast of a 262k-wide row
        if part is None:
            return super().logits(head, hidden, ids)
        if ids is not None and len(part.raws) == 1 and hidden.shape[0] < (native.batch_min_rows() or part.gemm_min_rows):
            raw, qtype = part.raws[0]  # the GEMV over the rows of ids: each dot product as the whole head's
            return native.NativeMatmul([(raw[ids], qtype)], part.k, part.gemm_min_rows)(hidden)
        logits = part(hidden)
        return logits if ids is None else logits[:, ids]

    def linear_row_regimes(self, model, quantized_kv: bool) -> tuple[int, ...] | None:
        """The int8 VNNI GEMV below native.batch_min_rows(), batch GEMMs below the layers' max_rows
        (AMX int8 tiles, or without AMX the int8 VNNI GEMM: lanes along outputs, so sums unlike the
        GEMV's), prefill GEMMs from there (AMX bf16 tiles; without AMX the same int8 GEMM). Within a regime a
        row is bit-identical whatever the rest of the step (attention splits a row's keys by the number
        of sequences, not of rows). The avx2 library has one GEMV below max_rows (no batch GEMMs:
        batch_min_rows() 0); without native attention for the cache (torch's) rows differ: None."""
        # the first native attention layer's (an lfm2 model's first layer is a short convolution), else the first
        # native conv layer's (qwen35: its gated attention runs torch's ops over native linears)
        ops = next((layer.ops for kind in (NativeLayerOps, NativeConvOps) for layer in model.layers
                    if isinstance(layer.ops, kind)), None)
        if (ops is None or not all(layer.ops.invariant_rows and _native_linears(layer) for layer in model.layers)
                or not native.has("paged_attention")):
            return None
        if quantized_kv and not native.has("kv_quant"):
            return None
        return tuple(r for r in (native.batch_min_rows(), ops.max_rows) if r > 0)

    def row_regimes(self, model, quantized_kv: bool) -> tuple[int, ...] | None:
        """linear_row_regimes where the native paged attention takes every layer's heads (else torch's
        attention runs, whose rows sum by the step's rows: None)."""
        regimes = self.linear_row_regimes(model, quantized_kv)
        return None if regimes is None or uncovered_heads(model) else regimes

    def batch_min_rows(self) -> int:
        return native.batch_min_rows()

    def batch_invariant(self, rows: int):
        return native.batch_invariant(rows) if rows > 0 else NO_CHANGE  # most steps: no generator made

    def row_passes(self) -> tuple[int, int, int]:
        """The exact AMX tiles' passes of 16 rows from batch_min_rows() on (the GEMV and the VNNI GEMM
        have none known)."""
        if not native.has("gemm") or native.vnni_gemm():
            return (0, 0, 0)
        return (native.batch_min_rows(), native.EXACT_TILE_ROWS, native.EXACT_TAIL_ROWS)
