"""The decoder-only transformer every supported architecture shares.

An architecture file says how its GGUF metadata maps onto ModelConfig and which variations of the
block it uses (an ArchSpec); the computation lives here once."""

from __future__ import annotations

import math
import torch
import torch.nn.functional as F
from torch import nn

from hearth.config import ModelConfig
from hearth.errors import ModelLoadError
from hearth.kernels import native
from hearth.kernels.attention import AttentionMetadata, paged_attention, write_kv_pair
from hearth.kernels.fused_layer import FusedLayer, FusedStack
from hearth.layers.linear import NativePart, build_embedding, build_linear
from hearth.layers.norm import RMSNorm
from hearth.layers.quant import dequantize
from hearth.layers.rotary import Rotary
from hearth.loader.gguf_loader import GGUFFile
from hearth.models.arch_spec import ArchSpec, admits


ACTIVATIONS = {
    "silu": F.silu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
}


def f32(g: GGUFFile, name: str) -> torch.Tensor:
    """A small tensor (norm weight, bias) as its own f32 copy."""
    t = g.tensor(name)
    return dequantize(t.data, t.qtype).reshape(t.shape).clone()


def maybe_f32(g: GGUFFile, name: str) -> torch.Tensor | None:
    return f32(g, name) if name in g.tensors else None


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, spec: ArchSpec, g: GGUFFile, i: int):
        super().__init__()
        p = f"blk.{i}."
        self.heads, self.kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_size, self.kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim
        names = [p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"]
        biases = [maybe_f32(g, n.replace(".weight", ".bias")) for n in names]
        bias = torch.cat(biases) if all(b is not None for b in biases) else None
        self.qkv = build_linear([g.tensor(n) for n in names], bias=bias)
        self.precise_scores = biases[1] is not None  # hearth.kernels.attention.PRECISE_SCORES
        self.o = build_linear(g.tensor(p + "attn_output.weight"))
        self.qk_norm = None
        if spec.qk_norm:  # one norm over q's and k's heads together: rows [heads + kv_heads, head_dim]
            qw, kw = f32(g, p + "attn_q_norm.weight"), f32(g, p + "attn_k_norm.weight")
            w = torch.cat([qw.expand(self.heads, -1), kw.expand(self.kv_heads, -1)])
            self.qk_norm = RMSNorm(w, cfg.rms_norm_eps)
        sliding = bool(cfg.sliding_window_pattern) and cfg.sliding_window_pattern[i]
        self.window = cfg.sliding_window if sliding else 0
        theta = cfg.rope_local_theta if (sliding and cfg.rope_local_theta) else cfg.rope_theta
        scale = 1.0 if sliding else cfg.rope_scaling_factor
        self.rope = Rotary(cfg.rope_dim or cfg.head_dim, theta, spec.neox_rope, scale)
        self.scale = cfg.attn_scale or 1.0 / math.sqrt(cfg.head_dim)
        self.softcap = cfg.attn_logit_softcap

    def forward(self, x, positions, meta: AttentionMetadata, kv_cache):  # x: [T, hidden]
        T, H, KV, D = x.shape[0], self.heads, self.kv_heads, self.head_dim
        y = self.qkv(x).float()  # [T, q | k | v] f32: q and k are normed and rotated in place
        qk = y[:, :self.q_size + self.kv_size].view(T, H + KV, D)
        if self.qk_norm is not None:
            self.qk_norm(qk, out=qk)
        self.rope(qk, positions, meta.cache)
        write_kv_pair(kv_cache, y[:, self.q_size:].view(T, 2, KV, D), meta)
        o = paged_attention(y[:, :self.q_size].view(T, H, D), kv_cache, meta, self.scale, self.window, self.softcap,
                            self.precise_scores)
        return self.o(o.reshape(T, self.q_size).to(self.o.in_dtype))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig, spec: ArchSpec, g: GGUFFile, i: int):
        super().__init__()
        p = f"blk.{i}."
        self.gate_up = build_linear([g.tensor(p + "ffn_gate.weight"), g.tensor(p + "ffn_up.weight")])
        self.down = build_linear(g.tensor(p + "ffn_down.weight"))
        self.act = ACTIVATIONS[spec.activation]
        self.activation = spec.activation
        self.inter = cfg.intermediate_size

    def forward(self, x):  # x: [T, hidden]
        gate, up = self.gate_up(x).split(self.inter, dim=-1)
        # in the linear's dtype: bf16 rounding here is finer than llama.cpp's 8-bit activations
        return self.down(self.act(gate).mul_(up))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, spec: ArchSpec, g: GGUFFile, i: int):
        super().__init__()
        p, eps = f"blk.{i}.", cfg.rms_norm_eps
        self.attn = Attention(cfg, spec, g, i)
        self.mlp = MLP(cfg, spec, g, i)
        self.attn_norm = RMSNorm(f32(g, p + "attn_norm.weight"), eps)
        self.ffn_norm = RMSNorm(f32(g, p + "ffn_norm.weight"), eps)
        # the norms feeding a linear write the dtype it computes in (bf16 on the fast paths)
        self.attn_norm.out_dtype = self.attn.qkv.in_dtype
        self.ffn_norm.out_dtype = self.mlp.gate_up.in_dtype
        self.post_attn_norm = self.post_ffn_norm = None
        if spec.sandwich_norm:
            self.post_attn_norm = RMSNorm(f32(g, p + "post_attention_norm.weight"), eps)
            self.post_ffn_norm = RMSNorm(f32(g, p + "post_ffw_norm.weight"), eps)

        self.native = _native_plans(self, spec)
        self.native_max_rows = self.native[0].gemm_min_rows if self.native else 0
        self.fused = _fused(self, spec) if self.native and native.has("layer") else None

    def forward(self, x, positions, meta, kv_cache, out_rows: list[int] | None = None):
        """x: [T, hidden] f32, the residual stream -> after this layer, every row or only out_rows
        (the model's last layer: every row's K/V is stored, only the sampled rows go on)."""
        # every row count where the library has prefill GEMMs (AMX bf16 tiles, or the C++ GEMMs without
        # AMX); the avx2 library's GEMV takes decode-sized steps only, prefills go to dense tiles
        if self.native and (x.shape[0] < self.native_max_rows or native.has("gemm")):
            return self._forward_native(x, positions, meta, kv_cache, out_rows)
        h = self.attn(self.attn_norm(x), positions, meta, kv_cache)
        if out_rows is not None:
            x, h = x[out_rows], h[out_rows]
        if self.post_attn_norm is not None:
            h = self.post_attn_norm(h)
        x = x + h  # f32 + bf16 promotes to f32: no cast op
        h = self.mlp(self.ffn_norm(x))
        if self.post_ffn_norm is not None:
            h = self.post_ffn_norm(h)
        return x.add_(h)

    def _forward_native(self, x, positions, meta, kv_cache, out_rows):
        """The same block in 5 C++ calls plus attention: norms, activation, rope and residual adds are
        fused around the native matmuls (8-bit activations for a few rows, bf16 tiles for prefill
        chunks), saving ~30 torch ops per layer; a step of a few rows, or one sequence's prefill chunk,
        runs it in one call (which, when out_rows are its last rows, computes no others past the K/V)."""
        a, T = self.attn, x.shape[0]
        cos, sin = a.rope.halves(positions, meta.cache)
        keep = _kept_tail(out_rows, T)
        if self.fused is not None:
            if T < self.native_max_rows:
                if self.fused(x, cos, sin, kv_cache, meta):
                    return x if out_rows is None else x[out_rows]
            elif keep is not None and not a.precise_scores and self.fused.prefill(x, cos, sin, kv_cache, meta, keep):
                return x if keep == T else x[T - keep:]
        return self._forward_native_ops(x, cos, sin, kv_cache, meta, out_rows)

    def _forward_native_ops(self, x, cos, sin, kv_cache, meta, out_rows):
        a, T = self.attn, x.shape[0]
        qkv, o, gate_up, down = (p.mm for p in self.native)
        n = self.attn_norm
        y = qkv(x, norm=n.weight, eps=n.eps, bias=a.qkv.bias)  # [T, q | k | v] f32
        native.qk_rope(y[:, :a.q_size + a.kv_size].view(T, a.heads + a.kv_heads, a.head_dim), a.rope.rot_dim,
                       cos, sin, a.rope.neox, *_norm_args(a.qk_norm))
        write_kv_pair(kv_cache, y[:, a.q_size:].view(T, 2, a.kv_heads, a.head_dim), meta)
        attn = paged_attention(y[:, :a.q_size].view(T, a.heads, a.head_dim), kv_cache, meta, a.scale, a.window,
                               a.softcap, a.precise_scores).view(T, a.q_size)
        if out_rows is not None:  # as the fused prefill: only these rows past attention
            if not out_rows:
                return x[:0]
            x, attn = x[out_rows], attn[out_rows]
        o.add_to(attn, x, *_norm_args(self.post_attn_norm))
        return native.mlp_add_to(gate_up, down, self.mlp.activation, x, *_norm_args(self.ffn_norm),
                                 *_norm_args(self.post_ffn_norm))


def _norm_args(norm: RMSNorm | None) -> tuple[torch.Tensor | None, float]:
    """(weight, eps) as the C++ layer takes a norm the architecture may lack: (None, 0.0)."""
    return (None, 0.0) if norm is None else (norm.weight, norm.eps)


def _kept_tail(out_rows: list[int] | None, T: int) -> int | None:
    """How many rows go on past a fused prefill: all T, or len(out_rows) when they are the last rows
    in order; None when they are not (the fused calls only keep a tail)."""
    keep = T if out_rows is None else len(out_rows)
    return keep if out_rows is None or out_rows == list(range(T - keep, T)) else None


def _native_plans(layer: DecoderLayer, spec: ArchSpec) -> tuple[NativePart, ...] | None:
    """The layer's qkv, o, gate_up and down parts when each is one NativePart (and the C++ layer
    implements every ArchSpec field the model sets), else None: the layer then runs op by op."""
    lins = (layer.attn.qkv, layer.attn.o, layer.mlp.gate_up, layer.mlp.down)
    parts = tuple(lin.parts[0] if len(lin.parts) == 1 else None for lin in lins)
    if not all(isinstance(p, NativePart) for p in parts):
        return None
    if not admits(FusedLayer.NAME, FusedLayer.IMPLEMENTS, spec):  # the C++ layer, fused or in parts
        return None
    if not native.has("fused_ops"):  # the kernel library has the GEMV but not the ops around it
        return None
    if any(lin.bias is not None for lin in lins[1:]):
        return None
    return parts


def _fused(layer: DecoderLayer, spec: ArchSpec) -> FusedLayer:
    a, n = layer.attn, lambda norm: _norm_args(norm)[0]
    norms = [n(layer.attn_norm), a.qkv.bias, n(a.qk_norm), n(layer.post_attn_norm), n(layer.ffn_norm),
             n(layer.post_ffn_norm)]
    e = lambda norm: _norm_args(norm)[1]  # noqa: E731
    eps = [e(layer.attn_norm), e(a.qk_norm), e(layer.post_attn_norm), e(layer.ffn_norm), e(layer.post_ffn_norm)]
    return FusedLayer(tuple(p.mm for p in layer.native), norms, eps, spec.activation, a.rope.neox, a.heads,
                      a.kv_heads, a.head_dim, a.rope.rot_dim, a.window, a.scale, a.softcap or 0.0)


class CausalLM(nn.Module):
    """Subclasses set `spec` and implement `config_from_gguf`."""

    spec = ArchSpec()

    def __init__(self, cfg: ModelConfig, g: GGUFFile, progress=None):
        super().__init__()
        self.cfg = cfg
        self.embed = build_embedding(g.tensor("token_embd.weight"))
        # f32 sqrt like llama.cpp's sqrtf(n_embd); transformers casts it to the weight dtype, which is
        # the same value in f32 (in bf16 it would round 25.298 -> 25.25 for gemma3-270m)
        scale = torch.tensor(math.sqrt(cfg.hidden_size), dtype=torch.float32).item()
        self.embed_scale = scale if self.spec.embed_scale else 1.0
        layers = []
        for i in range(cfg.num_layers):
            layers.append(DecoderLayer(cfg, self.spec, g, i))
            if progress is not None:
                progress(i + 1, cfg.num_layers)
        self.layers = nn.ModuleList(layers)
        fused = [layer.fused for layer in layers]
        # the stack's attention is the bf16 tile kernel: not for layers that need f32 scores
        stackable = all(f is not None and not layer.attn.precise_scores for f, layer in zip(fused, layers))
        self.fused_stack = FusedStack(fused) if stackable else None
        self.norm = RMSNorm(f32(g, "output_norm.weight"), cfg.rms_norm_eps)
        head = g.tensors.get("output.weight") or g.tensor("token_embd.weight")
        self.lm_head = build_linear(head)

    @classmethod
    def config_from_gguf(cls, g: GGUFFile) -> ModelConfig:
        raise NotImplementedError

    def forward(self, ids, positions, meta: AttentionMetadata, kv_caches: list[torch.Tensor],
                out_rows: list[int] | None = None):
        # ids, positions: [T] -> hidden: [T, hidden], or [len(out_rows), hidden] for those rows only
        x = self.embed(ids)  # a new tensor
        if self.embed_scale != 1.0:
            x.mul_(self.embed_scale)
        if out_rows is not None and len(out_rows) == len(ids):  # every row (distinct indices)
            out_rows = None
        last = len(self.layers) - 1
        done = self._prefill_stack(x, positions, meta, kv_caches, out_rows)
        if done == len(self.layers) and out_rows is not None:
            x = x[len(ids) - len(out_rows):]
        for i in range(done, len(self.layers)):
            x = self.layers[i](x, positions, meta, kv_caches[i], out_rows if i == last else None)
        return self.norm(x)

    def _prefill_stack(self, x, positions, meta: AttentionMetadata, kv_caches, out_rows) -> int:
        """How many layers one C++ call ran (FusedStack), when this step is one sequence's chunk
        long enough for the bf16 tiles and the rows going on are its last ones; 0 otherwise."""
        keep = _kept_tail(out_rows, x.shape[0])
        if self.fused_stack is None or x.shape[0] < self.layers[0].native_max_rows or keep is None:
            return 0
        tables = [layer.attn.rope.halves(positions, meta.cache) for layer in self.layers]
        return self.fused_stack.prefill(x, tables, kv_caches, meta, keep)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:  # [N, hidden] -> [N, vocab] f32
        head = self.lm_head.parts[0] if len(self.lm_head.parts) == 1 else None
        if isinstance(head, NativePart):
            logits = head(hidden)  # f32 in, f32 out (also from its bf16 tiles): no cast of a 262k-wide row
        else:
            logits = self.lm_head(hidden.to(self.lm_head.in_dtype)).float()
        cap = self.cfg.final_logit_softcap
        return torch.tanh(logits / cap) * cap if cap else logits


def require(g: GGUFFile, key: str):
    v = g.arch_get(key)
    if v is None:
        raise ModelLoadError(f"{g.path}: metadata key {g.arch}.{key} is missing")
    return v


def base_config(g: GGUFFile, **overrides) -> ModelConfig:
    """The fields every architecture reads the same way from `{arch}.*` keys."""
    hidden, heads = int(require(g, "embedding_length")), int(require(g, "attention.head_count"))
    kv_heads = g.arch_get("attention.head_count_kv", heads)
    head_dim = int(g.arch_get("attention.key_length", hidden // heads))
    vocab = g.arch_get("vocab_size") or g.tensor("token_embd.weight").shape[0]
    fields = dict(
        arch=g.arch,
        num_layers=int(require(g, "block_count")),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=int(kv_heads),
        head_dim=head_dim,
        intermediate_size=int(require(g, "feed_forward_length")),
        vocab_size=int(vocab),
        context_length=int(g.arch_get("context_length", 2048)),
        rms_norm_eps=float(g.arch_get("attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=float(g.arch_get("rope.freq_base", 10000.0)),
        rope_dim=int(g.arch_get("rope.dimension_count", head_dim)),
        tie_word_embeddings="output.weight" not in g.tensors,
    )
    if g.arch_get("rope.scaling.type") == "linear":
        fields["rope_scaling_factor"] = float(g.arch_get("rope.scaling.factor", 1.0))
    fields.update(overrides)
    return ModelConfig(**fields)
