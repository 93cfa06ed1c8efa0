"""LFM2's gated short convolution, the block some of its layers run in place of attention (transformers'
Lfm2ShortConv, llama.cpp's build_shortconv_block): B | C | x = in_proj(norm(h)); y = C * conv(B * x) over the
last L tokens, per channel; out_proj(y); then the same SwiGLU MLP as an attention layer.

Its state is the paged cache's: each token's B * x sits in the layer's cache tensor at the token's slot, under
the block ids the attention layers' K/V use, and the conv reads the L - 1 tokens before a row from their slots
as attention reads past keys. So prefix caching, chunked prefill, recompute after preemption, a rejected
draft's rollback and the disk tier hold it with no state of its own."""

from __future__ import annotations

import torch
from torch import nn

from hearth.config import ModelConfig
from hearth.layers.norm import RMSNorm
from hearth.loader.gguf_loader import GGUFFile
from hearth.models.arch_spec import ArchSpec
from hearth.models.gguf_tensors import f32
from hearth.models.transformer import MLP


class ShortConvLayer(nn.Module):
    lora_ops = None

    def __init__(self, cfg: ModelConfig, spec: ArchSpec, g: GGUFFile, i: int, backend):
        super().__init__()
        p, eps = f"blk.{i}.", cfg.rms_norm_eps
        self.hidden = cfg.hidden_size
        self.in_proj = backend.linear(g.tensor(p + "shortconv.in_proj.weight"))  # [3 hidden, hidden]: rows B | C | x
        self.out_proj = backend.linear(g.tensor(p + "shortconv.out_proj.weight"))
        # the file's [hidden, L] (HF's conv [hidden, 1, L] squeezed) -> [L, hidden]; tap L - 1: the row's own
        self.register_buffer("taps", f32(g, p + "shortconv.conv.weight").t().contiguous(), persistent=False)
        self.width = self.taps.shape[0]
        self.mlp = MLP(cfg, spec, g, i, backend)
        self.attn_norm = RMSNorm(f32(g, p + "attn_norm.weight"), eps)  # HF's operator_norm
        self.ffn_norm = RMSNorm(f32(g, p + "ffn_norm.weight"), eps)
        self.attn_norm.out_dtype, self.ffn_norm.out_dtype = self.in_proj.in_dtype, self.mlp.in_dtype
        self.post_ffn_norm = None
        self.ops = backend.conv_ops(self)  # its steps around the conv (ConvOps), and whether rows stay invariant

    def forward(self, x, positions, meta, cache, out_rows: list[int] | None = None):
        """x: [T, hidden] f32, the residual stream; cache: [1, num_blocks, block_size, 1, hidden] (LayerCache)
        -> after this layer, every row or only out_rows (every row's B * x is stored)."""
        H, ops = self.hidden, self.ops.for_rows(x.shape[0])
        b, c, h = ops.conv_in(self, x).split(H, dim=-1)  # [T, hidden] each
        flat = cache.view(-1, H)  # [num_blocks * block_size, hidden]
        flat.index_copy_(0, meta.slot_mapping.to(flat.device), (b * h).to(flat.dtype))
        taps = meta.conv_taps(self.width)  # [T, L] slots, -1 before position 0
        if out_rows is not None:
            if not out_rows:
                return x[:0]
            x, c, taps = x[out_rows], c[out_rows], taps[out_rows]
        taps = taps.to(flat.device)
        # every tap read back from the cache, the row's own too: a chunk reads what a decode would
        window = torch.where((taps >= 0)[..., None], flat[taps.clamp(min=0)].float(), 0.0)  # [R, L, hidden]
        y = window[:, 0] * self.taps[0]
        for k in range(1, self.width):  # one product at a time, in tap order: the same sums whatever the rows
            y += window[:, k] * self.taps[k]
        return ops.mlp_add(self, ops.conv_out_add(self, c * y, x))
