"""The ViT of an mmproj (CLIP for LLaVA, SigLIP for gemma3 and idefics3), llama.cpp's `v.*` tensors: patch
embedding (a stride-p convolution, F16/F32 in every converter's file), [class row], learned positions,
[pre-LayerNorm], pre-norm blocks of bidirectional attention and an MLP, [post-LayerNorm]. The same math
as transformers' CLIPVisionTransformer and SiglipVisionTransformer; which parts a file has says which.
Positions are the patches' row-major indices, as llama.cpp's; Idefics3's bucketized ids are the same for
one whole image at the grids real models use (26, 27, 32 per side; not at e.g. 25 or 29, where float
rounding in transformers shifts a bucket)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from hearth.errors import ModelLoadError
from hearth.layers.linear import DensePart, QuantLinear
from hearth.loader.gguf_loader import GGUFFile
from hearth.media.config import VisionConfig
from hearth.models.encoder import LayerNorm
from hearth.models.gguf_tensors import f32, maybe_f32

ACTIVATIONS = {
    "gelu": lambda x: F.gelu(x, approximate="tanh"),  # ggml_gelu; SigLIP's gelu_pytorch_tanh
    "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),  # CLIP's quick_gelu, ggml_gelu_quick
    "silu": F.silu,
}


def _linear(g: GGUFFile, backend, names: list[str]) -> Affine:
    """Weights fused along out_features (q | k | v), with their biases (every ViT linear has one)."""
    biases = [maybe_f32(g, n.replace(".weight", ".bias")) for n in names]
    bias = torch.cat(biases) if all(b is not None for b in biases) else None
    return Affine(backend.linear([g.tensor(n) for n in names], bias=bias))


class Affine(nn.Module):
    """x @ W.T + b in the linear's own activation dtype (bf16 on the fast paths, f32 for F32 or exact weights):
    a dense weight takes one addmm with the bias in it (no f32 round trip of the [N, out] rows per linear);
    other parts (the native GEMMs on Q8_0 blocks, the exact twin) their QuantLinear, cast to that dtype."""

    def __init__(self, lin: QuantLinear):
        super().__init__()
        self.lin, self.dtype, self.in_features = lin, lin.in_dtype, lin.in_features
        part = lin.parts[0] if len(lin.parts) == 1 else None
        self.weight = part.weight if isinstance(part, DensePart) and part.weight.dtype == self.dtype else None
        self.bias = None if lin.bias is None else lin.bias.to(self.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [N, in] in self.dtype -> [N, out] in self.dtype
        if self.weight is None:
            return self.lin(x).to(self.dtype)
        return x @ self.weight.T if self.bias is None else torch.addmm(self.bias, x, self.weight.T)


class VisionBlock(nn.Module):
    def __init__(self, cfg: VisionConfig, g: GGUFFile, i: int, backend):
        super().__init__()
        p = f"v.blk.{i}."
        self.heads, self.head_dim, self.hidden = cfg.heads, cfg.hidden // cfg.heads, cfg.hidden
        self.ln1, self.ln2 = LayerNorm(g, p + "ln1", cfg.eps), LayerNorm(g, p + "ln2", cfg.eps)
        self.qkv = _linear(g, backend, [p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"])
        self.o = _linear(g, backend, [p + "attn_out.weight"])
        up, down = p + "ffn_up.weight", p + "ffn_down.weight"
        if cfg.ffn != cfg.hidden and g.tensor(down).shape == (cfg.ffn, cfg.hidden):
            up, down = down, up  # the legacy LLaVA converter names fc1 ffn_down (llama.cpp's is_ffn_swapped)
        self.up, self.down = _linear(g, backend, [up]), _linear(g, backend, [down])
        self.act = ACTIVATIONS[cfg.activation]
        self.backend = backend
        # the rows between the norms and the residual adds in one dtype: bf16 where every linear computes in
        # it (the fast paths), else f32; the residual stream stays f32
        dtypes = {lin.dtype for lin in (self.qkv, self.o, self.up, self.down)}
        self.dtype = dtypes.pop() if len(dtypes) == 1 else torch.float32

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: f32 [N, hidden] (one image's rows) -> [N, hidden]."""
        n, dt = x.shape[0], self.dtype
        q, k, v = (t.view(n, self.heads, self.head_dim)
                   for t in self.qkv(self.ln1(x).to(dt)).split(self.hidden, dim=-1))
        attn = self.backend.full_attention(q, k, v, 1.0 / math.sqrt(self.head_dim))  # every row sees all
        x = x + self.o(attn.reshape(n, self.hidden))
        return x + self.down(self.act(self.up(self.ln2(x).to(dt))))


class VisionTower(nn.Module):
    def __init__(self, cfg: VisionConfig, g: GGUFFile, backend):
        super().__init__()
        self.cfg = cfg
        self.patch = f32(g, "v.patch_embd.weight")  # [hidden, 3, p, p]
        self.patch_bias = maybe_f32(g, "v.patch_embd.bias")  # SigLIP's; CLIP's convolution has none
        self.cls = maybe_f32(g, "v.class_embd")  # [hidden]: CLIP's class row, first
        self.positions = f32(g, "v.position_embd.weight")  # [rows, hidden]
        rows = cfg.patches_per_side ** 2 + (self.cls is not None)
        patch = (cfg.hidden, 3, cfg.patch_size, cfg.patch_size)
        if self.patch.shape != patch or self.positions.shape != (rows, cfg.hidden):
            raise ModelLoadError(f"{g.path}: mmproj patch embedding {tuple(self.patch.shape)} or positions "
                                 f"{tuple(self.positions.shape)} do not fit {cfg.image_size} px in {cfg.patch_size} "
                                 f"px patches of width {cfg.hidden}")
        self.pre_ln = LayerNorm(g, "v.pre_ln", cfg.eps) if "v.pre_ln.weight" in g.tensors else None
        self.post_ln = LayerNorm(g, "v.post_ln", cfg.eps) if "v.post_ln.weight" in g.tensors else None
        self.blocks = nn.ModuleList(VisionBlock(cfg, g, i, backend) for i in range(max(cfg.feature_layers)))

    def check(self, pixels) -> None:
        """ValueError unless pixels is one [3, S, S] piece."""
        s = self.cfg.image_size
        if pixels.shape != (3, s, s):
            raise ValueError(f"pixels of shape {tuple(pixels.shape)}; this encoder reads [3, {s}, {s}]")

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """pixels: f32 [3, S, S] -> the feature layers' states concatenated: [rows, hidden * len(feature_layers)]
        (rows: the patches row-major, after the class row where the tower has one)."""
        x = F.conv2d(pixels[None], self.patch, self.patch_bias, stride=self.cfg.patch_size)  # [1, hidden, n, n]
        x = x.flatten(2)[0].T  # [n * n, hidden]
        if self.cls is not None:
            x = torch.cat([self.cls[None], x])
        x = x + self.positions
        if self.pre_ln is not None:
            x = self.pre_ln(x)
        wanted, states = self.cfg.feature_layers, {}
        for i, block in enumerate(self.blocks):
            if i in wanted:
                states[i] = x
            x = block(x)
        if self.post_ln is not None and len(self.blocks) == self.cfg.layers:
            x = self.post_ln(x)  # the last block's output, llama.cpp's graph: SigLIP's last_hidden_state
        states[len(self.blocks)] = x
        return torch.cat([states[i] for i in wanted], dim=-1)
