"""The decoder-only transformer every supported architecture shares.

An architecture file says how its GGUF metadata maps onto ModelConfig and which variations of the
block it uses (an ArchSpec); the computation lives here once, over a backend (hearth.backends.base:
the device's linears, attention and KV writes, and how it runs the layer's steps)."""

from __future__ import annotations

import logging
import math
from dataclasses import replace

import torch
from torch import nn

from hearth.config import (FileScaling, LinearScaling, ModelConfig, NoScaling, RopeScaling, YarnScaling,
                           is_sliding, layer_head_dim, layer_kv_heads, stretched_context)
from hearth.errors import ModelLoadError
from hearth.layers.activation import ACTIVATIONS
from hearth.layers.attn_temperature import AttnTemperature
from hearth.layers.norm import NoNorm, RMSNorm, WholeQKNorm
from hearth.layers.rotary import RopeFactors, Rotary, yarn_factors
from hearth.loader.gguf_loader import GGUFFile, head_tensor
from hearth.models.arch_spec import ArchSpec
from hearth.models.gguf_tensors import f32, maybe_f32
from hearth.models.moe import MoE

log = logging.getLogger("hearth.models")




def rope_factors(g: GGUFFile, cfg: ModelConfig) -> RopeFactors | None:
    """The per-pair rope factors llama.cpp's converter precomputes: Llama 3.1's scaling in
    rope_freqs.weight, Phi-3's LongRoPE in rope_factors_short/long.weight; YaRN's (yarn_factors),
    times rope_freqs where both are given (as ggml divides by both); None without any."""
    def pairs(name: str) -> tuple[float, ...]:
        return tuple(f32(g, name).double().tolist())
    freqs = pairs("rope_freqs.weight") if "rope_freqs.weight" in g.tensors else ()
    if cfg.rope_yarn is not None:
        rot = cfg.rope_dim or cfg.head_dim
        y = yarn_factors(rot, cfg.rope_theta, cfg.rope_yarn, cfg.rope_yarn.original_context or cfg.context_length)
        short = tuple(a * b for a, b in zip(y.short, freqs)) if freqs else y.short
        return RopeFactors(short, attn_factor=y.attn_factor * cfg.rope_attn_factor)
    if freqs:
        return RopeFactors(freqs)
    if "rope_factors_long.weight" in g.tensors:
        # a file without the original context: its own (llama.cpp's n_ctx_orig_yarn = n_ctx_train)
        return RopeFactors(pairs("rope_factors_short.weight"), pairs("rope_factors_long.weight"),
                           cfg.rope_original_context or cfg.context_length, cfg.rope_attn_factor)
    return None


class Attention(nn.Module):
    """The attention block's weights and shape; DecoderLayer.forward computes it. factors: the model's
    rope factors (rope_factors, read once for every layer)."""

    def __init__(self, cfg: ModelConfig, spec: ArchSpec, g: GGUFFile, i: int, backend, factors: RopeFactors | None):
        super().__init__()
        p = f"blk.{i}."
        self.heads, self.kv_heads, self.head_dim = cfg.num_heads, layer_kv_heads(cfg, i), layer_head_dim(cfg, i)
        self.q_size, self.kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim
        names = [p + "attn_q.weight", *self.kv_names(g, p)]
        if p + "attn_qkv.weight" in g.tensors:  # one matrix, rows [q | k | v] (phi3)
            names = [p + "attn_qkv.weight"]
        _check_heads(g, p, names, cfg, spec, self)
        biases = [maybe_f32(g, n.replace(".weight", ".bias")) for n in names]
        bias = torch.cat(biases) if all(b is not None for b in biases) else None
        self.qkv = backend.linear([g.tensor(n) for n in names], bias=bias)
        self.precise_scores = bias is not None  # a k bias: hearth.kernels.attention.PRECISE_SCORES
        self.o = backend.linear(g.tensor(p + "attn_output.weight"), bias=maybe_f32(g, p + "attn_output.bias"))
        self.qk_norm = None
        if spec.qk_norm:
            qw, kw = f32(g, p + "attn_q_norm.weight"), maybe_f32(g, p + "attn_k_norm.weight")
            if spec.qk_norm_whole:  # qw: [heads * head_dim], kw: [kv_heads * head_dim]
                self.qk_norm = WholeQKNorm(RMSNorm(qw, cfg.rms_norm_eps), RMSNorm(kw, cfg.rms_norm_eps), self.heads)
            else:  # one norm over q's and k's heads together: rows [heads + kv_heads, head_dim] (q's alone where
                # the layer projects no k: gemma4's KV-shared layers)
                w = torch.cat([qw.expand(self.heads, -1)] + ([] if kw is None else [kw.expand(self.kv_heads, -1)]))
                self.qk_norm = RMSNorm(w, cfg.rms_norm_eps)
        sliding = is_sliding(cfg, i)
        self.window = cfg.sliding_window if sliding else 0
        theta = (cfg.rope_local_theta or cfg.rope_swa_theta or cfg.rope_theta) if sliding else cfg.rope_theta
        local = sliding and bool(cfg.rope_local_theta)  # gemma3's sliding layers: their own base, unscaled
        # linear scaling on every other layer, as transformers' and llama.cpp's (its swa layers: the file's factor)
        scale = cfg.rope_scaling_factor
        if sliding:
            scale = 1.0 if local else cfg.rope_swa_scale or scale
        rotates = not cfg.rope_layers or cfg.rope_layers[i]  # a NoPE layer rotates no dims (every path's no-op)
        rot = (cfg.rope_dim_swa if sliding and cfg.rope_dim_swa else cfg.rope_dim) or self.head_dim
        self.rope = Rotary(rot if rotates else 0, theta, spec.neox_rope, scale,
                           None if local or not rotates else factors, cfg.rope_sections if rotates else (),
                           cfg.rope_layout)
        self.scale = cfg.attn_scale or 1.0 / math.sqrt(self.head_dim)
        self.temperature = (AttnTemperature(cfg.attn_temperature_scale, cfg.attn_temperature_floor)
                            if spec.attn_temperature else None)
        self.softcap = cfg.attn_logit_softcap
        self.sinks = f32(g, p + "attn_sinks.weight") if spec.attn_sinks else None  # [heads]

    def kv_names(self, g: GGUFFile, p: str) -> list[str]:
        """The tensors of the layer's k and v projections, after q's in its one qkv linear."""
        return [p + "attn_k.weight", p + "attn_v.weight"]


def _check_heads(g: GGUFFile, p: str, names: list[str], cfg: ModelConfig, spec: ArchSpec, attn) -> None:
    """The layer's q/k/v rows and attn_output's shape as the header's heads x head_dim and hidden size say,
    before any kernel reads them: a file whose header gives other heads or head_dim (key_length missing
    where heads x head_dim is not the hidden size) ran the native matmuls out of bounds (a heap abort)."""
    heads = f"the header's {attn.heads} heads x head_dim {attn.head_dim} ({g.arch}.attention.key_length)"
    kv = f"the header's {attn.kv_heads} KV heads x head_dim {attn.head_dim}"
    hidden = f"the hidden size ({g.arch}.embedding_length)"
    checks = [(p + "attn_output.weight", 1, attn.q_size, heads), (p + "attn_output.weight", 0, cfg.hidden_size, hidden)]
    checks += [(n, 0, attn.kv_size, kv) for n in names if n.endswith(("attn_k.weight", "attn_v.weight"))]
    checks += [(n, 0, attn.q_size * (2 if spec.attn_output_gate else 1), heads)  # a gated q: [query | gate]
               for n in names if n.endswith("attn_q.weight")]
    _check_shapes(g, checks + [(n, 1, cfg.hidden_size, hidden) for n in names])


def _check_shapes(g: GGUFFile, checks: list[tuple[str, int, int, str]]) -> None:
    """Each (tensor, axis, size, what says so): the tensor's rows (axis 0) or columns (1) are that size."""
    for name, axis, size, why in checks:
        if g.tensor(name).shape[axis] != size:
            raise ModelLoadError(f"{g.path}: {name} has shape {list(g.tensor(name).shape)}, where {why} need "
                                 f"{size} {'columns' if axis else 'rows'}")


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig, spec: ArchSpec, g: GGUFFile, i: int, backend):
        super().__init__()
        p = f"blk.{i}."
        # phi3 holds both in ffn_up, rows [gate | up]
        fused = p + "ffn_gate.weight" not in g.tensors
        up, hidden = g.tensor(p + "ffn_up.weight"), (cfg.hidden_size, f"the hidden size ({g.arch}.embedding_length)")
        inter = (up.shape[0] // 2 if fused else up.shape[0], f"{p}ffn_up.weight's {'half ' if fused else ''}rows")
        _check_shapes(g, [(p + "ffn_down.weight", 1, *inter), (p + "ffn_down.weight", 0, *hidden),
                          (p + "ffn_up.weight", 1, *hidden)]
                      + ([] if fused else [(p + "ffn_gate.weight", 0, *inter), (p + "ffn_gate.weight", 1, *hidden)]))
        self.gate_up = backend.linear([g.tensor(p + "ffn_up.weight")] if fused else
                                      [g.tensor(p + "ffn_gate.weight"), g.tensor(p + "ffn_up.weight")])
        self.down = backend.linear(g.tensor(p + "ffn_down.weight"))
        self.act = ACTIVATIONS[spec.activation]
        self.activation = spec.activation
        self.inter = self.gate_up.out_features // 2  # its own (gemma4's double-wide layers: twice the file's first)
        self.in_dtype = self.gate_up.in_dtype

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """h: the normed hidden [T, hidden] -> down(act(gate) * up) [T, hidden]."""
        gate, up = self.gate_up(h).split(self.inter, dim=-1)
        # in the linear's dtype: bf16 rounding here is finer than llama.cpp's 8-bit activations
        return self.down(self.act(gate).mul_(up))


def feed_forward(cfg: ModelConfig, spec: ArchSpec, g: GGUFFile, i: int, backend, moe_block: type[MoE] = MoE):
    """Layer i's MLP: the dense SwiGLU, or where the file routes it (a MoE model's dense layers have no router)
    the architecture's routed experts."""
    if spec.moe and f"blk.{i}.ffn_gate_inp.weight" in g.tensors:
        return moe_block(cfg, g, i, backend, spec.activation)
    return MLP(cfg, spec, g, i, backend)


class DecoderLayer(nn.Module):
    lora_ops = None
    """With LoRA adapters (hearth.models.lora): the ops of the steps where one is on (idle(): none is)."""
    attention_class: type[Attention] = Attention

    def __init__(self, cfg: ModelConfig, spec: ArchSpec, g: GGUFFile, i: int, backend, factors: RopeFactors | None,
                 moe_block: type[MoE] = MoE):
        super().__init__()
        p, eps = f"blk.{i}.", cfg.rms_norm_eps
        self.backend = backend
        self.attn = self.attention_class(cfg, spec, g, i, backend, factors)
        self.mlp = feed_forward(cfg, spec, g, i, backend, moe_block)
        if spec.pre_norm:
            self.attn_norm = RMSNorm(f32(g, p + "attn_norm.weight"), eps)
            # gpt-oss names its one norm before the MLP post_attention_norm (llama.cpp's attn_post_norm)
            ffn_norm = p + ("ffn_norm.weight" if spec.sandwich_norm or p + "ffn_norm.weight" in g.tensors
                            else "post_attention_norm.weight")
            self.ffn_norm = RMSNorm(f32(g, ffn_norm), eps)
        else:  # olmo2: attention and the MLP read the residual stream as it is
            self.attn_norm, self.ffn_norm = NoNorm(), NoNorm()
        # the norms feeding a linear write the dtype it computes in (bf16 on the fast paths)
        self.attn_norm.out_dtype = self.attn.qkv.in_dtype
        self.ffn_norm.out_dtype = self.mlp.in_dtype
        self.post_attn_norm = self.post_ffn_norm = None
        if spec.sandwich_norm:
            self.post_attn_norm = RMSNorm(f32(g, p + "post_attention_norm.weight"), eps)
            self.post_ffn_norm = RMSNorm(f32(g, p + "post_ffw_norm.weight"), eps)
        self.ops = backend.layer_ops(self, spec)  # how the backend runs the steps below

    def forward(self, x, positions, meta, kv_cache, out_rows: list[int] | None = None):
        """x: [T, hidden] f32, the residual stream -> after this layer, every row or only out_rows
        (the model's last layer: every row's K/V is stored, only the sampled rows go on)."""
        T = x.shape[0]
        ops = (self.ops if self.lora_ops is None or self.lora_ops.idle() else self.lora_ops).for_rows(T)
        done = ops.whole(self, x, positions, meta, kv_cache, out_rows)
        if done is not None:
            return done
        a, b = self.attn, self.backend
        y = ops.qkv(self, x)  # [T, q | k | v] f32: q and k are normed and rotated in place
        ops.qk_rope(self, y[:, :a.q_size + a.kv_size].view(T, a.heads + a.kv_heads, a.head_dim), positions, meta)
        if a.temperature is not None:  # the queries only, after rope
            a.temperature.scale_(y[:, :a.q_size].view(T, a.heads, a.head_dim), positions, meta.memo.temperature)
        b.write_kv(kv_cache, y[:, a.q_size:].view(T, 2, a.kv_heads, a.head_dim), meta)
        attn = b.attention(y[:, :a.q_size].view(T, a.heads, a.head_dim), kv_cache, meta, a.scale, a.window,
                           a.softcap, a.precise_scores, a.sinks).view(T, a.q_size)
        if out_rows is not None:  # only these rows past attention
            if not out_rows:
                return x[:0]
            x, attn = x[out_rows], attn[out_rows]
        return ops.mlp_add(self, ops.out_add(self, attn, x))


class CausalLM(nn.Module):
    """Subclasses set `spec` and implement `config_from_gguf`."""

    spec = ArchSpec()
    lora = None
    """LoraRows once adapters are attached (hearth.models.lora): the step's scales, set by the runner."""
    lora_stack = None
    """With adapters: the stack for the steps where one is on (Backend.lora_stack), or None (op by op)."""
    moe_block: type[MoE] = MoE
    """The routed-experts block of its MoE layers (gpt-oss: its own routing and activation)."""
    rank_head_class: type | None = None
    """The head its reranker files (pooling_type 4) score with (qwen3: hearth.models.rank_head.RankHead); None:
    such a file is refused (hearth.models.registry), as llama.cpp builds cls.output for qwen3 alone."""
    final_norm = "output_norm.weight"
    """The GGUF tensor of the norm before the head."""

    def __init__(self, cfg: ModelConfig, g: GGUFFile, backend, progress=None):
        super().__init__()
        self.cfg, self.backend = cfg, backend
        self.embed = backend.embedding(g.tensor("token_embd.weight"))
        # f32 sqrt like llama.cpp's sqrtf(n_embd); transformers casts it to the weight dtype, which is
        # the same value in f32 (in bf16 it would round 25.298 -> 25.25 for gemma3-270m)
        scale = torch.tensor(math.sqrt(cfg.hidden_size), dtype=torch.float32).item()
        self.embed_scale = scale if self.spec.embed_scale else cfg.embedding_scale
        if cfg.num_experts and not self.spec.moe:  # an architecture whose files come dense or routed (llama: Mixtral)
            self.spec = replace(self.spec, moe=True)
        if cfg.attn_temperature_scale:  # the file's key turns it on (mistral3's Ministral 3; not Mistral Small 3.1)
            self.spec = replace(self.spec, attn_temperature=True)
        layers, factors = [], rope_factors(g, cfg)
        # sliding layers at the file's base (--rope-freq-base): YaRN's ramp placed by that base, as ggml's corr dims
        swa_factors = rope_factors(g, replace(cfg, rope_theta=cfg.rope_swa_theta)) if cfg.rope_swa_theta else factors
        for i in range(cfg.num_layers):
            sliding = bool(cfg.sliding_window_pattern) and cfg.sliding_window_pattern[i]
            layers.append(self.block(cfg, g, i, backend, swa_factors if sliding else factors))
            if progress is not None:
                progress(i + 1, cfg.num_layers)
        self.layers = nn.ModuleList(layers)
        self.stack = backend.stack(layers)  # a prefill chunk through many layers in one call, or None
        # logits / logit_scale (granite) as the final norm's weight / logit_scale: the head is linear, and every
        # reader of the logits (a reduced draft head too) gets them
        self.norm = RMSNorm(f32(g, self.final_norm) / cfg.logit_scale, cfg.rms_norm_eps)
        self.lm_head = backend.head(head_tensor(g))
        # a reranker's pooled last row goes through it (hearth.runner.pooling); its lm_head still samples the
        # one token an engine request computes past its prompt
        self.rank_head = self.rank_head_class(g, cfg.hidden_size) if cfg.pooling == "rank" else None

    def block(self, cfg: ModelConfig, g: GGUFFile, i: int, backend, factors: RopeFactors | None) -> nn.Module:
        """Layer i (an architecture with other kinds of layers builds those here: lfm2's short convolutions)."""
        return DecoderLayer(cfg, self.spec, g, i, backend, factors, self.moe_block)

    @classmethod
    def config_from_gguf(cls, g: GGUFFile) -> ModelConfig:
        raise NotImplementedError

    def fit_context(self, n: int) -> None:
        """It will run sequences of up to n tokens (LLM sizes the context after the load): the rope's
        factors for that context (Rotary.fit_context)."""
        for layer in self.layers:
            if hasattr(layer, "attn"):  # not a short convolution's (lfm2)
                layer.attn.rope.fit_context(n)

    def forward(self, ids, positions, meta, kv_caches: list,
                out_rows: list[int] | None = None, embeds: tuple[torch.Tensor, torch.Tensor] | None = None):
        # ids, positions: [T] -> hidden: [T, hidden], or [len(out_rows), hidden] for those rows only
        # embeds: (rows [R] int64, values [R, hidden * (1 + cfg.deepstack_layers)]): the first part written over
        # those rows' token embeddings (an image's), part i added at them after layer i - 1 (Qwen3-VL's deepstack)
        x = self.embed(ids)  # a new tensor
        if self.embed_scale != 1.0:
            x.mul_(self.embed_scale)
        deep = None
        if embeds is not None:  # after the scale: HF's models insert image features unscaled (Gemma3's too)
            rows, values = embeds
            rows, values = rows.to(x.device), values.to(x.device, x.dtype).view(len(rows), -1, x.shape[1])
            x.index_copy_(0, rows, values[:, 0])
            deep = (rows, values[:, 1:]) if values.shape[1] > 1 else None  # [R, parts, hidden]
        if out_rows is not None and len(out_rows) == len(ids):  # every row (distinct indices)
            out_rows = None
        if self.lora is not None:  # the last layer's o and MLP see only out_rows: their scales
            self.lora.out_rows = out_rows
        last = len(self.layers) - 1
        done = 0
        stack = self.stack if self.lora is None or self.lora.scales is None else self.lora_stack  # an adapter on?
        if stack is not None and deep is None:  # the stack's one call adds nothing between layers
            done, x = stack.run(x, positions, meta, kv_caches, out_rows)
        for i in range(done, len(self.layers)):
            x = self.layers[i](x, positions, meta, kv_caches[i], out_rows if i == last else None)
            if deep is not None and i < deep[1].shape[1]:  # never the last layer (Qwen3VLForCausalLM's check)
                x.index_add_(0, deep[0], deep[1][:, i])
        return self.backend.norm(self.norm, x)

    def compute_logits(self, hidden: torch.Tensor, ids: torch.Tensor | None = None) -> torch.Tensor:
        """[N, hidden] -> [N, vocab] f32; with ids [M] (sorted, distinct) only those tokens are scored,
        the rest -inf: the rows a grammar allows, each value the whole head's."""
        logits = self.backend.logits(self.lm_head, hidden, ids)
        cap = self.cfg.final_logit_softcap
        logits = torch.tanh(logits / cap) * cap if cap else logits
        if ids is None:
            return logits
        out = logits.new_full((hidden.shape[0], self.lm_head.out_features), float("-inf"))
        out[:, ids] = logits
        return out


POOLING_TYPES = {1: "mean", 3: "last", 4: "rank"}
"""llama.cpp's LLAMA_POOLING_TYPE values a decoder's file may say (0 none and 2 cls: the default stands);
4 rank, a decoder reranker's (Qwen3-Reranker as llama.cpp converts it), runs where the architecture has a
rank_head_class (CausalLM) and is refused elsewhere (hearth.models.registry.model_config)."""


def require(g: GGUFFile, key: str):
    v = g.arch_get(key)
    if v is None:
        raise ModelLoadError(f"{g.path}: metadata key {g.arch}.{key} is missing")
    return v


YARN_KEYS = {"yarn_ext_factor": "ext_factor", "yarn_attn_factor": "attn_factor", "yarn_beta_fast": "beta_fast",
             "yarn_beta_slow": "beta_slow", "yarn_log_multiplier": "log_multiplier"}
"""`{arch}.rope.scaling.*` keys llama.cpp's converter may write -> YarnScaling's fields (absent: its defaults)."""


def yarn_from_gguf(g: GGUFFile, original: int) -> YarnScaling:
    given = {name: float(v) for key, name in YARN_KEYS.items() if (v := g.arch_get(f"rope.scaling.{key}")) is not None}
    # llama.cpp: a negative yarn_ext_factor means "not set" (1 for yarn)
    if given.get("ext_factor", 0.0) < 0:
        del given["ext_factor"]
    return YarnScaling(float(g.arch_get("rope.scaling.factor", 1.0)), original, **given)


def with_rope_scaling(cfg: ModelConfig, y: RopeScaling) -> ModelConfig:
    """The engine's rope scaling in place of the file's (llama-server's --rope-scaling yarn|linear|none): the
    original context defaults to the file's; the model's context becomes factor x that, or the file's if larger."""
    if isinstance(y, FileScaling):  # llama.cpp keeps the file's scaling type (and its yarn settings), a new factor
        y = replace(cfg.rope_yarn, factor=y.factor) if cfg.rope_yarn is not None else LinearScaling(y.factor)
    pattern = cfg.sliding_window_pattern  # llama.cpp's swa layers keep the file's factor (freq_scale_train_swa)
    if any(pattern) and not all(pattern):
        cfg = replace(cfg, rope_swa_scale=cfg.rope_swa_scale or cfg.rope_scaling_factor)
    if isinstance(y, NoScaling):  # llama.cpp's freq_scale 1, ext_factor 0: the file's context, nothing stretched
        return replace(cfg, rope_yarn=None, rope_scaling_factor=1.0)
    context, original = stretched_context(y, cfg.context_length, cfg.rope_original_context)
    y = replace(y, original_context=original)
    if isinstance(y, YarnScaling) and cfg.rope_yarn is not None:  # the architecture's rounding (gpt-oss: none) stays
        y = replace(y, truncate=cfg.rope_yarn.truncate)
    yarn, linear = (y, 1.0) if isinstance(y, YarnScaling) else (None, y.factor)
    return replace(cfg, rope_yarn=yarn, rope_scaling_factor=linear, context_length=context)


def with_rope_base(cfg: ModelConfig, base: float) -> ModelConfig:
    """llama-server's --rope-freq-base: the global layers' rope base in place of the file's; sliding-window layers
    keep the file's and the model's factors (llama.cpp's get_rope_freq_base gives them rope_freq_base_train_swa, the
    file's). A window on every layer (phi3) is no swa there (llama.cpp turns phi3's off): every layer takes the base."""
    pattern = cfg.sliding_window_pattern
    swa = cfg.rope_theta if any(pattern) and not all(pattern) else 0.0
    return replace(cfg, rope_theta=float(base), rope_swa_theta=swa)


def base_config(g: GGUFFile, **overrides) -> ModelConfig:
    """The fields every architecture reads the same way from `{arch}.*` keys."""
    hidden, heads = int(require(g, "embedding_length")), int(require(g, "attention.head_count"))
    kv_heads = g.arch_get("attention.head_count_kv", heads)
    if isinstance(kv_heads, list):  # per layer (lfm2: 0 on its conv layers): the attention layers'
        kv_heads = max(kv_heads)
    head_dim = int(g.arch_get("attention.key_length", hidden // heads))
    # given: a file of routed experts only may have none (qwen35moe's converter writes none)
    ffn = 0 if "intermediate_size" in overrides else require(g, "feed_forward_length")
    if isinstance(ffn, list):  # per layer (gemma4's double-wide MLPs): the widest; each MLP reads its own
        ffn = max(ffn)
    vocab = g.arch_get("vocab_size") or g.tensor("token_embd.weight").shape[0]
    fields = dict(
        arch=g.arch,
        num_layers=int(require(g, "block_count")),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=int(kv_heads),
        head_dim=head_dim,
        intermediate_size=int(ffn),
        vocab_size=int(vocab),
        context_length=int(g.arch_get("context_length", 2048)),
        rms_norm_eps=float(g.arch_get("attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=float(g.arch_get("rope.freq_base", 10000.0)),
        rope_dim=int(g.arch_get("rope.dimension_count", head_dim)),
        tie_word_embeddings="output.weight" not in g.tensors,
    )
    if (pooling := POOLING_TYPES.get(g.arch_get("pooling_type"))) is not None:
        fields["pooling"] = pooling
    fields["rope_original_context"] = int(g.arch_get("rope.scaling.original_context_length") or 0)
    fields["rope_attn_factor"] = float(g.arch_get("rope.scaling.attn_factor", 1.0))
    scaling = g.arch_get("rope.scaling.type")
    if scaling == "linear":
        fields["rope_scaling_factor"] = float(g.arch_get("rope.scaling.factor", 1.0))
    elif scaling == "yarn":
        fields["rope_yarn"] = yarn_from_gguf(g, fields["rope_original_context"] or fields["context_length"])
    elif scaling not in (None, "none") and "rope_factors_long.weight" not in g.tensors:
        # longrope without its factors, or a type hearth does not know: positions past the original context would be off
        original = fields["rope_original_context"] or fields["context_length"]
        fields["context_length"] = min(fields["context_length"], original)
        log.warning("%s: rope scaling %r is not implemented: the context is kept to the model's original "
                    "%d tokens", g.path.name, scaling, fields["context_length"])
    fields.update(overrides)
    return ModelConfig(**fields)
