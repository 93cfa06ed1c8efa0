"""A mixture-of-experts MLP (Qwen3-MoE's sparse block): per token, the router's softmax over every
expert, its top-k, renormalized to sum to 1 where the model does (norm_topk_prob), then the weighted
sum of the chosen experts' SwiGLU outputs. Same math as transformers' Qwen3MoeSparseMoeBlock and
llama.cpp's build_moe_ffn(..., norm_w) with softmax gating.

Correct first: each expert is a pair of ordinary linears over its own 2-D view of the stacked GGUF
tensors (hearth.loader.gguf_loader.expert_views, no copy), run on the rows routed to it; no fused
backend path implements ArchSpec.moe, so these layers run op by op."""

from __future__ import annotations

import torch
from gguf import ExpertGatingFuncType
from torch import nn

from hearth.config import ModelConfig
from hearth.errors import UnsupportedError
from hearth.layers.quant import dequantize
from hearth.loader.gguf_loader import GGUFFile, expert_views


def moe_config(g: GGUFFile, weights_norm: bool) -> dict:
    """ModelConfig fields of a MoE file's `{arch}.expert_*` keys; weights_norm: the architecture's
    renormalization when the file does not state it (llama.cpp hard-codes it per graph: true for qwen3moe)."""
    count, used = g.arch_get("expert_count"), g.arch_get("expert_used_count")
    if not count or not used or used > count:
        raise UnsupportedError(f"{g.path}: a MoE model needs {g.arch}.expert_count and {g.arch}.expert_used_count "
                               f"(at most expert_count); the file has {count} and {used}")
    gating = int(g.arch_get("expert_gating_func", ExpertGatingFuncType.SOFTMAX))
    if gating != ExpertGatingFuncType.SOFTMAX:
        raise UnsupportedError(f"{g.path}: {g.arch}.expert_gating_func={gating}: only softmax routing (1) is implemented")
    ffn = g.arch_get("expert_feed_forward_length")
    if not ffn:  # [experts, expert_ffn, hidden]; a fused gate|up tensor is twice as tall
        fused = "blk.0.ffn_gate_up_exps.weight" in g.tensors
        stacked = g.tensor("blk.0.ffn_gate_up_exps.weight" if fused else "blk.0.ffn_gate_exps.weight")
        ffn = stacked.shape[1] // (1 + fused)
    return dict(num_experts=int(count), experts_used=int(used), expert_ffn=int(ffn),
                expert_weights_norm=bool(g.arch_get("expert_weights_norm", weights_norm)))


class MoE(nn.Module):
    """forward(h: normed hidden [T, hidden]) -> [T, hidden] f32, like the dense MLP's."""

    in_dtype = torch.float32  # the router's logits are taken in f32: a bf16 input could flip a near tie

    def __init__(self, cfg: ModelConfig, g: GGUFFile, i: int, backend, act):
        super().__init__()
        p = f"blk.{i}."
        r = g.tensor(p + "ffn_gate_inp.weight")  # [n_expert, hidden], f32 in llama.cpp's files (never quantized)
        # F32 (as llama.cpp keeps it): a view of the file, no copy
        self.register_buffer("router", dequantize(r.data, r.qtype).reshape(r.shape), persistent=False)
        self.router_bias = _bias(g, p + "ffn_gate_inp.bias")  # [n_expert] (gpt-oss), or None
        # per expert: gate|up [2 * expert_ffn, hidden] (two views, or one of a file converted with
        # --fuse-gate-up-exps: ffn_gate_up_exps, rows [gate | up]) and down [hidden, expert_ffn], each a linear
        if p + "ffn_gate_up_exps.weight" in g.tensors:
            gate_ups = [[v] for v in expert_views(g.tensor(p + "ffn_gate_up_exps.weight"))]
            gate_up_bias = _bias(g, p + "ffn_gate_up_exps.bias")
        else:
            gates, ups = (expert_views(g.tensor(p + f"ffn_{w}_exps.weight")) for w in ("gate", "up"))
            gate_ups = [list(pair) for pair in zip(gates, ups)]
            bg, bu = (_bias(g, p + f"ffn_{w}_exps.bias") for w in ("gate", "up"))
            gate_up_bias = None if bg is None else torch.cat([bg, bu], dim=1)
        downs, down_bias = expert_views(g.tensor(p + "ffn_down_exps.weight")), _bias(g, p + "ffn_down_exps.bias")
        # per-expert biases (gpt-oss): stacked [n_expert, out], each expert's row its linear's bias
        self.gate_up = nn.ModuleList(backend.linear(w, bias=None if gate_up_bias is None else gate_up_bias[e])
                                     for e, w in enumerate(gate_ups))
        self.down = nn.ModuleList(backend.linear(d, bias=None if down_bias is None else down_bias[e])
                                  for e, d in enumerate(downs))
        self.top_k, self.renorm, self.inter, self.act = cfg.experts_used, cfg.expert_weights_norm, cfg.expert_ffn, act

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """h: [T, hidden] -> the router's f32 logits [T, n_expert]."""
        logits = h.float() @ self.router.T
        return logits if self.router_bias is None else logits.add_(self.router_bias)

    def route(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """h: [T, hidden] -> (weights f32 [T, k], expert ids [T, k])."""
        probs = torch.softmax(self.logits(h), dim=-1)  # [T, n_expert]
        weights, ids = probs.topk(self.top_k, dim=-1)
        if self.renorm:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights, ids

    def expert(self, e: int, x: torch.Tensor) -> torch.Tensor:
        """Expert e's SwiGLU: x f32 [rows, hidden] -> f32 [rows, hidden]. f32 in and out: the native GEMV
        reads f32 with no cast (a bf16 input would add four casts per expert, measured ~1.3x its time)."""
        gate, up = self.gate_up[e](x).split(self.inter, dim=-1)
        return self.down[e](self.glu(gate, up))

    def glu(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        """The gated activation of an expert's two halves [rows, expert_ffn] (into gate's memory)."""
        return self.act(gate).mul_(up)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        weights, ids = self.route(h)
        if h.shape[0] == 1:  # decode: k experts, no gather or scatter (~10 torch ops fewer per layer)
            return self._one_row(h, weights[0].tolist(), ids[0].tolist())
        out = torch.zeros(h.shape, dtype=torch.float32, device=h.device)
        for e in ids.unique().tolist():  # ascending, as transformers sums them
            rows, slot = (ids == e).nonzero(as_tuple=True)  # the tokens routed to e, and where in their top-k
            out.index_add_(0, rows, self.expert(e, h[rows]).mul_(weights[rows, slot, None]))
        return out

    def _one_row(self, h: torch.Tensor, weights: list[float], ids: list[int]) -> torch.Tensor:
        """The same sum in the same order (ascending experts) as forward's scatter, for one row."""
        out = None
        for e, w in sorted(zip(ids, weights)):
            y = self.expert(e, h).mul_(w)
            out = y if out is None else out.add_(y)
        return out


def _bias(g: GGUFFile, name: str) -> torch.Tensor | None:
    """An F32 bias in the file as its own f32 tensor (its shape kept), or None where the file has none."""
    if name not in g.tensors:
        return None
    t = g.tensor(name)
    return dequantize(t.data, t.qtype).reshape(t.shape).clone()
