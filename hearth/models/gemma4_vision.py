"""Gemma 4's vision tower and embedder (llama.cpp's `gemma4v` projector: tools/mtmd/models/gemma4v.cpp; the math of
transformers' Gemma4VisionModel + Gemma4MultimodalEmbedder):
  patches scaled to [-1, 1] -> conv patch embedding (no bias) + learned x and y position tables (v.position_embd:
  [2 * table, hidden], x's rows then y's) -> RMS-norm blocks (q/k norms per head, v normed without a weight, 2-D
  neox rope: the head's first half turned by the column, the second by the row, theta 100; attention scale 1;
  norms after attention and after the gated gelu MLP) -> k x k average pool * sqrt(hidden) -> [(x - std_bias) *
  std_scale] -> RMS norm without a weight -> mm.input_projection.
Linears may clamp their input and output (Gemma4ClippableLinear: .input_min/.input_max/.output_min/.output_max)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from hearth.errors import ModelLoadError
from hearth.layers.norm import RMSNorm
from hearth.loader.gguf_loader import GGUFFile
from hearth.media.config import VisionConfig
from hearth.models.gguf_tensors import f32, maybe_f32

ROPE_THETA = 100.0  # llama.cpp's hparams.rope_theta for gemma4v (HF's Gemma4VisionConfig default_theta)


class Clipped(nn.Module):
    """A linear whose input and output are clamped where the file holds the bounds (llama.cpp's clamp_info_map)."""

    def __init__(self, g: GGUFFile, backend, name: str):
        super().__init__()
        self.lin = backend.linear(g.tensor(name + ".weight"))
        self.in_features = self.lin.in_features
        bounds = [maybe_f32(g, f"{name}.{b}") for b in ("input_min", "input_max", "output_min", "output_max")]
        self.bounds = [None if b is None else float(b.reshape(-1)[0]) for b in bounds]

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [N, in] -> f32 [N, out]
        lo, hi, out_lo, out_hi = self.bounds
        if lo is not None or hi is not None:
            x = x.clamp(lo, hi)
        y = self.lin(x.to(self.lin.in_dtype)).float()
        return y.clamp(out_lo, out_hi) if out_lo is not None or out_hi is not None else y


def _norm(g: GGUFFile, name: str, eps: float) -> RMSNorm:
    return RMSNorm(f32(g, name + ".weight"), eps)  # Gemma4RMSNorm: the weight as stored (no 1 + w)


def rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """RMS norm without a weight (HF's with_scale=False: v_norm, embedding_pre_projection_norm)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rope_2d(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [N, heads, d]; cos, sin: [N, 1, d] -> x with each half (columns, then rows) turned neox-style."""
    h = x.shape[-1] // 2
    q = x.shape[-1] // 4
    parts = []
    for part in (x[..., :h], x[..., h:]):
        parts.append(torch.cat([-part[..., q:], part[..., :q]], dim=-1))
    return x * cos + torch.cat(parts, dim=-1) * sin


def rope_angles(rows: int, cols: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [rows * cols, 1, head_dim] for the patches row-major: the first half by column, the second by row
    (HF's recomposition_frequencies: x, x, y, y quarters)."""
    half = head_dim // 2
    inv = 1.0 / ROPE_THETA ** (torch.arange(0, half, 2, dtype=torch.float32) / half)  # [head_dim / 4]
    y, x = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
    fx, fy = x.reshape(-1, 1).float() * inv, y.reshape(-1, 1).float() * inv
    ang = torch.cat([fx, fx, fy, fy], dim=-1)[:, None]  # [N, 1, head_dim]
    return ang.cos(), ang.sin()


class Gemma4VisionBlock(nn.Module):
    def __init__(self, cfg: VisionConfig, g: GGUFFile, i: int, backend):
        super().__init__()
        p, eps = f"v.blk.{i}.", cfg.eps
        self.heads, self.head_dim, self.eps = cfg.heads, cfg.hidden // cfg.heads, eps
        self.ln1, self.ln2 = _norm(g, p + "ln1", eps), _norm(g, p + "ln2", eps)
        self.attn_post, self.ffn_post = _norm(g, p + "attn_post_norm", eps), _norm(g, p + "ffn_post_norm", eps)
        self.q_norm, self.k_norm = _norm(g, p + "attn_q_norm", eps), _norm(g, p + "attn_k_norm", eps)
        self.q, self.k, self.v, self.o = (Clipped(g, backend, p + n)
                                          for n in ("attn_q", "attn_k", "attn_v", "attn_out"))
        self.gate, self.up, self.down = (Clipped(g, backend, p + n) for n in ("ffn_gate", "ffn_up", "ffn_down"))
        self.backend = backend

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x: f32 [N, hidden] -> [N, hidden]."""
        n, h = x.shape[0], self.ln1(x)
        q = rope_2d(self.q_norm(self.q(h).view(n, self.heads, self.head_dim)), cos, sin)
        k = rope_2d(self.k_norm(self.k(h).view(n, self.heads, self.head_dim)), cos, sin)
        v = rms(self.v(h).view(n, self.heads, self.head_dim), self.eps)
        attn = self.backend.full_attention(q, k, v, 1.0)  # every patch sees all; q/k normed, so scale 1
        x = x + self.attn_post(self.o(attn.reshape(n, -1)))
        h = self.ln2(x)
        return x + self.ffn_post(self.down(F.gelu(self.gate(h), approximate="tanh") * self.up(h)))


class Gemma4VisionTower(nn.Module):
    def __init__(self, cfg: VisionConfig, g: GGUFFile, backend):
        super().__init__()
        self.cfg, p = cfg, cfg.patch_size
        self.patch = f32(g, "v.patch_embd.weight")  # [hidden, 3, p, p]
        table = f32(g, "v.position_embd.weight")  # [2, size, hidden] (HF) stored as [2 * size, hidden]
        if self.patch.shape != (cfg.hidden, 3, p, p) or table.shape[-1] != cfg.hidden or table.numel() % 2:
            raise ModelLoadError(f"{g.path}: mmproj patch embedding {tuple(self.patch.shape)} or position table "
                                 f"{tuple(table.shape)} do not fit {p} px patches of width {cfg.hidden}")
        self.pos_x, self.pos_y = table.reshape(2, -1, cfg.hidden)  # [size, hidden] each
        self.blocks = nn.ModuleList(Gemma4VisionBlock(cfg, g, i, backend) for i in range(cfg.layers))

    def check(self, pixels) -> None:
        """ValueError unless pixels is one [3, H, W] image whose sides are whole pooled patches within the tables."""
        unit, size = self.cfg.patch_size * self.cfg.merge, self.pos_x.shape[0] * self.cfg.patch_size
        if (len(pixels.shape) != 3 or pixels.shape[0] != 3 or any(s % unit or not 0 < s <= size
                                                                   for s in pixels.shape[1:])):
            raise ValueError(f"pixels of shape {tuple(pixels.shape)}; this encoder reads [3, H, W], H and W "
                             f"multiples of {unit} up to {size}")

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """pixels: f32 [3, H, W] in [0, 1] -> [H / p, W / p, hidden] (the last block's output, as a grid)."""
        x = F.conv2d(pixels[None] * 2 - 1, self.patch, stride=self.cfg.patch_size)[0]  # [hidden, rows, cols]
        rows, cols = x.shape[1:]
        x = x.flatten(1).T  # [rows * cols, hidden], row-major
        x = x + self.pos_x[torch.arange(cols).repeat(rows)] + self.pos_y[torch.arange(rows).repeat_interleave(cols)]
        cos, sin = rope_angles(rows, cols, self.cfg.hidden // self.cfg.heads)
        for block in self.blocks:
            x = block(x, cos, sin)
        return x.view(rows, cols, -1)


class Gemma4VisionProjector(nn.Module):
    """Gemma4VisionPooler (k x k average * sqrt(hidden)), the optional standardization, Gemma4MultimodalEmbedder."""

    def __init__(self, cfg: VisionConfig, g: GGUFFile, backend):
        super().__init__()
        self.k, self.eps, self.scale = cfg.merge, cfg.eps, math.sqrt(cfg.hidden)
        self.std_bias, self.std_scale = maybe_f32(g, "v.std_bias"), maybe_f32(g, "v.std_scale")
        self.proj = Clipped(g, backend, "mm.input_projection")
        if self.proj.in_features != cfg.hidden:
            raise ModelLoadError(f"{g.path}: mm.input_projection reads rows of width {self.proj.in_features}, but "
                                 f"the tower's are {cfg.hidden} wide")

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [rows, cols, hidden] -> [rows * cols / k², lm_hidden]
        grid = x.permute(2, 0, 1)[None].float()  # [1, hidden, rows, cols]
        x = F.avg_pool2d(grid, self.k, self.k).flatten(2)[0].T * self.scale  # [pooled, hidden], row-major
        if self.std_bias is not None and self.std_scale is not None:
            x = (x - self.std_bias) * self.std_scale
        return self.proj(rms(x, self.eps))

