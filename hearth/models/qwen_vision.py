"""Qwen2-VL's, Qwen2.5-VL's and Qwen3-VL's vision tower and merger (llama.cpp's clip_graph_qwen2vl and
clip_graph_qwen3vl; transformers' Qwen2VisionTransformerPretrainedModel, Qwen2_5_VisionTransformerPretrainedModel
and Qwen3VLVisionModel), from llama.cpp's mmproj:
  patches   the processor's flattened patches (hearth.media.merge_units) x the Conv3d weight, whose temporal
            slices the file holds apart (v.patch_embd.weight, .weight.1): one matmul (3: plus its bias)
  positions 3: a learned table resampled to the grid (qwen_vision_grid.learned_positions), added
  blocks    pre-norm (LayerNorm; 2.5: RMSNorm), attention with 2-D rotary positions (qwen_vision_grid; 3: q/k/v
            fused in the file), an MLP (fc1/fc2 in the file's activation: 2's quick_gelu, 3's gelu tanh; 2.5: SwiGLU
            with biases, where the file has ffn_gate)
  windows   2.5: the merge units reordered window by window before the blocks; a block attends within its
            windows except every wa_pattern-th (whole image); the rows put back in the processor's order after
  deepstack 3: the outputs of the blocks cfg.deepstack_layers names, kept beside the last block's (their
            mergers: hearth.models.qwen_deepstack)
  merger    norm (v.post_ln) -> each unit's m * m rows side by side -> mm.0 -> gelu (erf) -> mm.2"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hearth.errors import ModelLoadError
from hearth.layers.norm import RMSNorm
from hearth.loader.gguf_loader import GGUFFile
from hearth.media.config import VisionConfig
from hearth.models.encoder import LayerNorm
from hearth.models.gguf_tensors import f32, maybe_f32
from hearth.models.qwen_vision_grid import learned_positions, rope_angles, windows
from hearth.models.vision_tower import ACTIVATIONS, _linear

NORMS = {"layer": LayerNorm, "rms": lambda g, name, eps: RMSNorm(f32(g, name + ".weight"), eps)}
"""Projector.norm -> (file, tensor prefix, eps) -> the norm module."""


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """HF's apply_rotary_pos_emb_vision: x [N, heads, d] rotated in f32 by [N, d] angles, back in x's dtype."""
    x1, x2 = x.float().chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return (x.float() * cos[:, None] + rotated * sin[:, None]).to(x.dtype)


class QwenVisionBlock(nn.Module):
    def __init__(self, cfg: VisionConfig, g: GGUFFile, i: int, backend):
        super().__init__()
        p = f"v.blk.{i}."
        self.heads, self.head_dim, self.hidden = cfg.heads, cfg.hidden // cfg.heads, cfg.hidden
        norm = NORMS[cfg.spec.norm]
        self.ln1, self.ln2 = norm(g, p + "ln1", cfg.eps), norm(g, p + "ln2", cfg.eps)
        # Qwen3-VL's converter keeps qkv fused (attn_qkv), Qwen2-VL's splits it: q | k | v either way
        fused = p + "attn_qkv.weight" in g.tensors
        self.qkv = _linear(g, backend, [p + "attn_qkv.weight"] if fused else
                           [p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"])
        self.o = _linear(g, backend, [p + "attn_out.weight"])
        # llama.cpp's build_ffn: gated where the file has a gate (2.5's SwiGLU), gate | up fused in one linear
        self.gated = p + "ffn_gate.weight" in g.tensors
        self.up = _linear(g, backend, ([p + "ffn_gate.weight"] if self.gated else []) + [p + "ffn_up.weight"])
        self.down = _linear(g, backend, [p + "ffn_down.weight"])
        self.act = ACTIVATIONS[cfg.activation]
        self.backend = backend
        dtypes = {lin.dtype for lin in (self.qkv, self.o, self.up, self.down)}  # as VisionBlock: bf16 on fast paths
        self.dtype = dtypes.pop() if len(dtypes) == 1 else torch.float32

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, spans: list[int] | None) -> torch.Tensor:
        """x: f32 [N, hidden]; cos, sin: f32 [N, head_dim]; spans: rows per window, in order (None: one, the
        whole image) -> [N, hidden]."""
        n, dt = x.shape[0], self.dtype
        q, k, v = (t.view(n, self.heads, self.head_dim)
                   for t in self.qkv(self.ln1(x).to(dt)).split(self.hidden, dim=-1))
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        scale = 1.0 / math.sqrt(self.head_dim)
        parts = [self.backend.full_attention(*qkv, scale)
                 for qkv in zip(*(t.split(spans or [n]) for t in (q, k, v)))]  # each window sees itself
        x = x + self.o(torch.cat(parts).reshape(n, self.hidden))
        h = self.up(self.ln2(x).to(dt))
        if self.gated:
            gate, up = h.chunk(2, dim=-1)
            return x + self.down(self.act(gate) * up)
        return x + self.down(self.act(h))


class QwenVisionTower(nn.Module):
    def __init__(self, cfg: VisionConfig, g: GGUFFile, backend):
        super().__init__()
        self.cfg, m, p = cfg, cfg.merge, cfg.patch_size
        names = ["v.patch_embd.weight"] + [f"v.patch_embd.weight.{t}" for t in range(1, cfg.spec.frames)]
        missing = [n for n in names if n not in g.tensors]
        if missing:
            raise ModelLoadError(f"{g.path}: mmproj has no {missing[0]} ({cfg.projector}: a patch embedding slice "
                                 f"for each of its {cfg.spec.frames} frames)")
        slices = [f32(g, n) for n in names]  # [hidden, 3, p, p] each
        if any(s.shape != (cfg.hidden, 3, p, p) for s in slices):
            raise ModelLoadError(f"{g.path}: mmproj patch embedding {tuple(slices[0].shape)} does not fit {p} px "
                                 f"patches of width {cfg.hidden}")
        # the Conv3d weight [hidden, C, T, p, p] flattened as the processor flattens a patch (C, T, p, p)
        self.patch = torch.stack(slices, dim=2).reshape(cfg.hidden, -1).T.contiguous()  # [3 * T * p * p, hidden]
        self.patch_bias = maybe_f32(g, "v.patch_embd.bias")  # [hidden]: Qwen3-VL's Conv3d has one
        self.positions = _position_table(cfg, g) if cfg.spec.learned_positions else None  # [side * side, hidden]
        self.deepstack = set(cfg.deepstack_layers)
        self.unit = m * m
        self.window = cfg.window // (p * m)  # units per window side; 0: no windows
        self.blocks = nn.ModuleList(QwenVisionBlock(cfg, g, i, backend) for i in range(cfg.layers))
        # llama.cpp's rule ((i + 1) % n_wa_pattern == 0), HF's fullatt_block_indexes as the converter found them
        self.whole = [not cfg.wa_pattern or (i + 1) % cfg.wa_pattern == 0 for i in range(cfg.layers)]

    def check(self, pixels: np.ndarray) -> None:
        width = self.patch.shape[0]
        if pixels.ndim != 4 or pixels.shape[2:] != (self.unit, width):
            raise ValueError(f"pixels of shape {tuple(pixels.shape)}; this encoder reads [rows, cols, {self.unit}, "
                             f"{width}]")

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """pixels: f32 [rows, cols, m * m, 3 * T * p * p] -> [rows * cols * m * m, hidden * (1 + deepstack)] in the
        processor's order: the last block's output, then each deepstack block's, side by side."""
        rows, cols = pixels.shape[:2]
        x = pixels.reshape(-1, self.patch.shape[0]) @ self.patch  # [N, hidden]
        if self.patch_bias is not None:
            x = x + self.patch_bias
        if self.positions is not None:
            x = x + learned_positions(self.positions, rows, cols, self.cfg.merge)
        cos, sin = rope_angles(rows, cols, self.cfg.merge, self.cfg.hidden // self.cfg.heads)  # [N, head_dim]
        order, spans = None, None
        if self.window:  # each window's patches together, and their angles with them
            order, sizes = windows(rows, cols, self.window)
            x, cos, sin = (self._units(t)[order].flatten(0, 1) for t in (x, cos, sin))
            spans = [s * self.unit for s in sizes]
        kept = []  # the deepstack blocks' outputs
        for i, (block, whole) in enumerate(zip(self.blocks, self.whole)):
            x = block(x, cos, sin, None if whole else spans)
            if i in self.deepstack:
                kept.append(x)
        x = torch.cat([x, *kept], dim=-1) if kept else x
        if order is not None:  # back in the processor's order (HF's reverse_indices after the merger: the same)
            x = self._units(x)[torch.argsort(order)].flatten(0, 1)
        return x

    def _units(self, t: torch.Tensor) -> torch.Tensor:
        return t.view(-1, self.unit, t.shape[-1])  # [units, m * m, d]


def _position_table(cfg: VisionConfig, g: GGUFFile) -> torch.Tensor:
    """Qwen3-VL's learned positions [side * side, hidden] (pos_embed: num_position_embeddings a square)."""
    name = "v.position_embd.weight"
    table = f32(g, name) if name in g.tensors else None
    side = round(table.shape[0] ** 0.5) if table is not None else 0
    if table is None or table.shape != (side * side, cfg.hidden):
        shape = "none" if table is None else tuple(table.shape)
        raise ModelLoadError(f"{g.path}: mmproj's {name} is {shape}: {cfg.projector} needs a square grid of "
                             f"positions of width {cfg.hidden}")
    return table


class QwenMerger(nn.Module):
    """PatchMerger: ln_q (v.post_ln) -> each unit's m * m rows side by side -> mm.0 -> gelu -> mm.2."""

    def __init__(self, cfg: VisionConfig, g: GGUFFile, backend):
        super().__init__()
        self.norm = NORMS[cfg.spec.norm](g, "v.post_ln", cfg.eps)
        self.mm0, self.mm2 = _linear(g, backend, ["mm.0.weight"]), _linear(g, backend, ["mm.2.weight"])
        self.width = cfg.hidden * cfg.merge ** 2
        if self.mm0.in_features != self.width:
            raise ModelLoadError(f"{g.path}: mm.0 reads rows of width {self.mm0.in_features}, but {cfg.merge} x "
                                 f"{cfg.merge} rows of width {cfg.hidden} make {self.width}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [N, hidden] -> [N / m ** 2, lm_hidden]
        x = self.norm(x).reshape(-1, self.width).to(self.mm0.dtype)
        return self.mm2(F.gelu(self.mm0(x)).to(self.mm2.dtype))
