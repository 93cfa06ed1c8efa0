"""RMSNorm, and the per-head q/k norm fused with rope, in Triton: the CUDA backend's (DESIGN.md, "Devices").

rms_norm: one program per row, f32 math whatever comes in (hearth.layers.norm.RMSNorm is the twin).
qk_norm_rope: one program per (row, head) of q | k, in place: the head's RMSNorm where the model has
one (qwen3, gemma3), then rope on its first `rot` dims, halves (neox) or adjacent pairs
(hearth.layers.rotary.Rotary is the twin; cos/sin are its `halves` tables)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hearth.errors import UnsupportedError
from hearth.kernels.gpu.launch import Tiles, launch


@triton.jit
def rms_norm_kernel(x, w, out, N, eps, BLOCK: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    i = tl.arange(0, BLOCK)
    m = i < N
    v = tl.load(x + r * N + i, mask=m, other=0.0).to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(v * v, axis=0) / N + eps)
    y = v * inv * tl.load(w + i, mask=m, other=0.0)
    tl.store(out + r * N + i, y.to(out.dtype.element_ty), mask=m)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """x: [T, N] -> [T, N] in out_dtype; weight: f32 [N]."""
    x = x.contiguous()
    t, n = x.shape
    out = torch.empty(t, n, dtype=out_dtype, device=x.device)
    launch(rms_norm_kernel, (t,), dict(x=x, w=weight, out=out, N=n, eps=eps), {"out": Tiles((1, n), (0, None))},
           ("x", "w"), BLOCK=triton.next_power_of_2(n))
    return out


@triton.jit
def qk_norm_rope_kernel(qk, cos, sin, w, s_row, heads, eps, D: tl.constexpr, HALF: tl.constexpr,
                        NEOX: tl.constexpr, NORM: tl.constexpr):
    """Program (t, h): head h of row t, normed (NORM) and its first 2 * HALF dims rotated, in place."""
    t, h = tl.program_id(0).to(tl.int64), tl.program_id(1)
    base = qk + t * s_row + h * D
    d = tl.arange(0, D)
    x = tl.load(base + d)
    i = tl.arange(0, HALF)
    if NEOX:  # (x[i], x[i + HALF])
        ia, ib = i, i + HALF
    else:  # (x[2i], x[2i + 1])
        ia, ib = 2 * i, 2 * i + 1
    a = tl.load(base + ia)
    b = tl.load(base + ib)
    if NORM:
        inv = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / D + eps)
        x = x * inv * tl.load(w + h * D + d)
        a = a * inv * tl.load(w + h * D + ia)
        b = b * inv * tl.load(w + h * D + ib)
    c = tl.load(cos + t * HALF + i)
    s = tl.load(sin + t * HALF + i)
    tl.store(base + d, x, mask=d >= 2 * HALF)  # past the rotated dims: only normed
    tl.store(base + ia, a * c - b * s)
    tl.store(base + ib, a * s + b * c)


def qk_norm_rope(qk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, neox: bool, rot: int,
                 norm_weight: torch.Tensor | None = None, eps: float = 0.0) -> None:
    """qk: f32 [T, heads, D] (a strided view of a wider row is fine: rows apart by any stride, heads
    contiguous), in place; cos, sin: f32 [T, rot / 2]; norm_weight: f32 [heads, D] or None."""
    t, heads, d = qk.shape
    half = rot // 2
    if d & (d - 1) or half & (half - 1) or qk.stride(2) != 1 or qk.stride(1) != d:
        raise UnsupportedError(f"the Triton rope needs power-of-two head_dim and rot / 2 over contiguous heads, "
                               f"not {d} and {half}")
    cos, sin = cos.contiguous(), sin.contiguous()
    w = norm_weight if norm_weight is not None else cos  # without a norm: a pointer the kernel never reads
    args = dict(qk=qk, cos=cos, sin=sin, w=w, s_row=qk.stride(0), heads=heads, eps=eps)
    launch(qk_norm_rope_kernel, (t, heads), args, {"qk": Tiles((1, 1, d), (0, 1, None))}, ("cos", "sin", "w"),
           D=d, HALF=half, NEOX=neox, NORM=norm_weight is not None)
