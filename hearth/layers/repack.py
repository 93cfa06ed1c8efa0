"""GGUF blocks -> the layouts the fast linear paths read, built once at load, row chunk by row chunk
(so no whole tensor is ever expanded to f32 on the way)."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from gguf import GGMLQuantizationType as Q

from hearth.errors import UnsupportedError
from hearth.kernels.qmatmul import GROUP, Int4Weight, pack_int4
from hearth.layers.quant import affine_rows, as_bytes, block_format, dequantize
from hearth.layers.repack_cache import cached_blob
from hearth.loader.gguf_loader import GGUFTensor

CHUNK_ROWS = 1024


def int4_planes(ts: list[GGUFTensor]) -> Int4Weight:
    """Tensors with the same in_features and 32-wide groups, stacked along out_features, as 4-bit
    planes (exact up to the bf16 rounding of scales and zeros). With w = s*q + o and v = q - c:
        v = sum_{p<P-1} 16**p * d_p + 16**(P-1) * t,   d_p in 0..15,  t in -8..7
    plane p < P-1 stores code d_p (scale 16**p * s), the top plane stores t + 8 (scale 16**(P-1) * s,
    so it needs no zero), and plane 0 carries z = o + c*s + 8*s*sum_{p<P-1} 16**p. Centering the top
    digit keeps z as small as the weights (a zero of ~128*s would cost bf16 precision)."""
    planes = {-(-block_format(t.qtype).q_bits // 4) for t in ts}
    if len(planes) != 1 or any(block_format(t.qtype).group_size != GROUP for t in ts):
        raise UnsupportedError(f"cannot stack {[t.qtype.name for t in ts]} as one int4 weight")
    p, n, k = planes.pop(), sum(t.shape[0] for t in ts), ts[0].shape[1]
    blob = cached_blob("int4", ts, Int4Weight.blob_bytes(n, k, p), lambda: pack_int4(n, k, p, _plane_chunks(ts, p)).blob)
    return Int4Weight.from_blob(blob, n, k, p)


def _plane_chunks(ts: list[GGUFTensor], planes: int) -> Iterator[tuple[torch.Tensor, ...]]:
    low = sum(16 ** p for p in range(planes - 1))
    shifts = torch.tensor([4 * p for p in range(planes)], dtype=torch.int16).view(1, planes, 1)
    pow16 = torch.tensor([16.0 ** p for p in range(planes)]).view(1, planes, 1)
    for t in ts:
        bits = block_format(t.qtype).q_bits
        c = 0 if 2 ** (bits - 4 * (planes - 1)) <= 8 else 2 ** (bits - 1)  # top digit in -8..7
        raw = as_bytes(t.data, t.qtype)
        for r in range(0, raw.shape[0], CHUNK_ROWS):
            q, s, o = affine_rows(raw[r:r + CHUNK_ROWS], t.qtype)  # q: [rows, K]; s, o: [rows, G]
            if planes == 1:  # 4-bit codes are their own plane (c = 8): no digit split
                yield q.unsqueeze(1), s.unsqueeze(1), (o + 8 * s).unsqueeze(1)
                continue
            digits = (q.to(torch.int16) - c).unsqueeze(1) >> shifts  # [rows, P, K]
            codes = digits & 0x0F
            codes[:, -1] = digits[:, -1] + 8
            zp = torch.zeros(s.shape[0], planes, s.shape[1])
            zp[:, 0] = o + c * s + 8 * low * s
            yield codes.to(torch.uint8), s.unsqueeze(1) * pow16, zp


def dense_bf16(t: GGUFTensor) -> torch.Tensor:
    """bf16 [N, K]: the memmap itself for BF16 tensors, else dequantized row chunk by row chunk."""
    raw = as_bytes(t.data, t.qtype)
    if t.qtype == Q.BF16:
        return raw.view(torch.bfloat16).view(t.shape)

    def build() -> torch.Tensor:
        out = torch.empty(t.shape, dtype=torch.bfloat16)
        for r in range(0, raw.shape[0], CHUNK_ROWS):
            out[r:r + CHUNK_ROWS] = dequantize(raw[r:r + CHUNK_ROWS], t.qtype)
        return out.view(-1).view(torch.uint8)

    return cached_blob("bf16", [t], 2 * t.shape[0] * t.shape[1], build).view(torch.bfloat16).view(t.shape)


def int8_rows(ts: list[GGUFTensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Tensors stacked along out_features, requantized to int8 codes with one scale per row:
    (int8 [N, K], bf16 scale [N]); w ~= scale * code, scale = max|w_row| / 127 rounded to bf16 first
    (the kernel multiplies by the bf16 value). Lossy: a row's step is its largest weight / 127, against a
    k-quant's step per 16 values (Q6_K: the rms weight error grows by ~2-20%; tests/models/test_fidelity)."""
    n, k = sum(t.shape[0] for t in ts), ts[0].shape[1]

    def build() -> torch.Tensor:
        blob = torch.empty(n * k + 2 * n, dtype=torch.uint8)
        codes, scale = blob[:n * k].view(torch.int8).view(n, k), blob[n * k:].view(torch.bfloat16)
        at = 0
        for t in ts:
            raw = as_bytes(t.data, t.qtype)
            for r in range(0, raw.shape[0], CHUNK_ROWS):
                w = dequantize(raw[r:r + CHUNK_ROWS], t.qtype)  # f32 [rows, K]
                s = (w.abs().amax(1) / 127).bfloat16()
                rows = slice(at + r, at + r + w.shape[0])
                scale[rows] = s
                codes[rows] = torch.round(w / s.float().clamp_min(1e-30).unsqueeze(1)).clamp_(-127, 127)
            at += raw.shape[0]
        return blob

    blob = cached_blob("int8", ts, n * k + 2 * n, build)
    return blob[:n * k].view(torch.int8).view(n, k), blob[n * k:].view(torch.bfloat16)
