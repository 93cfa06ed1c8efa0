"""y = x @ W.T with W in GGUF blocks, in Triton: the CUDA backend's linear (DESIGN.md, "Devices").

W stays as the file stores it, uint8 [N, bytes per row]; each program dequantizes the 32-wide
sub-blocks of its BN weight rows in registers as it walks K and never writes a weight. Two forms:
`gemv` (a few rows, decode: one program per activation row and BN outputs, products summed along K)
and `tiled` (prefill: BM x BN output tiles on tl.dot). Every launch goes through the checked launch
layer (hearth.kernels.gpu.launch). The torch twin is x @ hearth.layers.quant.dequantize(W).T; the
tests run both forms in Triton's interpreter on the CPU (TRITON_INTERPRET=1).

Block layouts (ggml's, as hearth.layers.quant decodes them):
  Q8_0  34 bytes / 32: d f16, 32 int8                      w = d * q
  Q4_0  18 bytes / 32: d f16, 16 bytes of nibbles          w = d * (q - 8)
  Q4_1  20 bytes / 32: d, m f16, 16 bytes of nibbles       w = d * q + m
  Q5_0  22 bytes / 32: d f16, qh u32 (fifth bits), nibbles w = d * (q - 16)
  Q5_1  24 bytes / 32: d, m f16, qh u32, nibbles           w = d * q + m
  Q4_K 144 bytes / 256: d, dmin f16, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles
                                                           w = d * sc * q - dmin * m per 32
  Q5_K 176 bytes / 256: as Q4_K with 32 bytes of fifth bits before the nibbles
  Q6_K 210 bytes / 256: 128 bytes low nibbles, 64 bytes high 2-bit pairs, 16 int8 scales, d f16
                                                           w = d * sc * (q - 32) per 16"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from gguf import GGMLQuantizationType as Q

from hearth.errors import UnsupportedError
from hearth.formats.weights import WEIGHT_FORMATS
from hearth.kernels.gpu.launch import Tiles, launch

QTYPES = (Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q4_K, Q.Q5_K, Q.Q6_K)
"""The block types these kernels read."""


@triton.jit
def _f16(ptr, mask):
    """Two little-endian bytes at ptr -> their f16 value, as f32 (0 where not mask)."""
    lo = tl.load(ptr, mask=mask, other=0).to(tl.uint16)
    hi = tl.load(ptr + 1, mask=mask, other=0).to(tl.uint16)
    return (lo | (hi << 8)).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def _subblock(w, rows, n_mask, row_bytes, s, QTYPE: tl.constexpr):
    """Sub-block s (K positions 32 s .. 32 s + 31) of weight rows `rows` [BN] -> f32 [BN, 32]."""
    lane = tl.arange(0, 32)
    row = w + rows[:, None].to(tl.int64) * row_bytes  # [BN, 1]
    m2 = n_mask[:, None]
    if QTYPE == 8:  # Q8_0
        blk = row + s * 34
        d = _f16(blk, m2)
        q = tl.load(blk + 2 + lane[None, :], mask=m2, other=0).to(tl.int8, bitcast=True).to(tl.float32)
        out = d * q
    elif QTYPE == 2 or QTYPE == 3 or QTYPE == 6 or QTYPE == 7:  # Q4_0, Q4_1, Q5_0, Q5_1
        # lanes 0..15 the low nibbles of the 16 quant bytes, lanes 16..31 their high nibbles; Q5_*: bit
        # `lane` of the little-endian uint32 qh is the fifth bit
        size: tl.constexpr = 18 if QTYPE == 2 else (20 if QTYPE == 3 else (22 if QTYPE == 6 else 24))
        blk = row + s * size
        d = _f16(blk, m2)
        byte = tl.load(blk + size - 16 + (lane[None, :] % 16), mask=m2, other=0)
        q = ((byte >> (4 * (lane[None, :] // 16)).to(tl.uint8)) & 0xF).to(tl.int32)
        if QTYPE == 6 or QTYPE == 7:
            qh = tl.load(blk + size - 20 + lane[None, :] // 8, mask=m2, other=0)
            q = q | ((((qh >> (lane[None, :] % 8).to(tl.uint8)) & 1).to(tl.int32)) << 4)
        if QTYPE == 2:
            out = d * (q.to(tl.float32) - 8.0)
        elif QTYPE == 6:
            out = d * (q.to(tl.float32) - 16.0)
        else:  # w = d * q + m
            out = d * q.to(tl.float32) + _f16(blk + 2, m2)
    elif QTYPE == 12 or QTYPE == 13:  # Q4_K, Q5_K: sub-block j of its superblock, 6-bit scale and min
        j = s % 8
        size: tl.constexpr = 144 if QTYPE == 12 else 176
        blk = row + (s // 8) * size
        d = _f16(blk, m2)
        dmin = _f16(blk + 2, m2)
        a = tl.load(blk + 4 + j, mask=m2, other=0)  # scales byte j (ggml's get_scale_min_k4)
        b = tl.load(blk + 8 + j, mask=m2, other=0)  # byte j + 4
        c = tl.load(blk + 4 + j % 4, mask=m2, other=0)  # byte j - 4 where j >= 4
        sc = tl.where(j < 4, a & 63, (b & 0xF) | ((c >> 6) << 4))
        mn = tl.where(j < 4, b & 63, (b >> 4) | ((a >> 6) << 4))
        byte = tl.load(blk + size - 128 + 32 * (j // 2) + lane[None, :], mask=m2, other=0)
        q = ((byte >> (4 * (j % 2))) & 0xF).to(tl.int32)
        if QTYPE == 13:  # Q5_K: bit j of qh[lane] is the fifth bit
            qh = tl.load(blk + 16 + lane[None, :], mask=m2, other=0)
            q = q | (((qh >> j) & 1).to(tl.int32) << 4)
        out = (d * sc.to(tl.float32)) * q.to(tl.float32) - dmin * mn.to(tl.float32)
    else:  # Q6_K (14): element e = 32 j + lane of the superblock
        j = s % 8
        blk = row + (s // 8) * 210
        e = 32 * j + lane[None, :]
        h, r = e // 128, e % 128
        low = (tl.load(blk + h * 64 + r % 64, mask=m2, other=0) >> (4 * (r // 64)).to(tl.uint8)) & 0xF
        high = (tl.load(blk + 128 + h * 32 + r % 32, mask=m2, other=0) >> (2 * (r // 32)).to(tl.uint8)) & 3
        sc = tl.load(blk + 192 + e // 16, mask=m2, other=0).to(tl.int8, bitcast=True).to(tl.float32)
        d = _f16(blk + 208, m2)
        out = (d * sc) * ((low | (high << 4)).to(tl.float32) - 32.0)
    return tl.where(m2, out, 0.0)


@triton.jit
def gguf_gemv(x, w, y, M, N, K, row_bytes, QTYPE: tl.constexpr, BN: tl.constexpr):
    """Program (m, n): y[m, n*BN : (n+1)*BN] = x[m] . W[rows] (f32 sums along K)."""
    m, pn = tl.program_id(0), tl.program_id(1)
    rows = pn * BN + tl.arange(0, BN)
    n_mask = rows < N
    acc = tl.zeros((BN,), dtype=tl.float32)
    for s in range(0, K // 32):
        xs = tl.load(x + m.to(tl.int64) * K + s * 32 + tl.arange(0, 32)).to(tl.float32)
        acc += tl.sum(_subblock(w, rows, n_mask, row_bytes, s, QTYPE) * xs[None, :], axis=1)
    tl.store(y + m.to(tl.int64) * N + rows, acc, mask=n_mask)


@triton.jit
def gguf_tiled(x, w, y, M, N, K, row_bytes, QTYPE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """Program (i, n): y[i*BM:(i+1)*BM, n*BN:(n+1)*BN] on tl.dot, 32 K positions at a time."""
    pm, pn = tl.program_id(0), tl.program_id(1)
    xrows = pm * BM + tl.arange(0, BM)
    rows = pn * BN + tl.arange(0, BN)
    m_mask, n_mask = xrows < M, rows < N
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for s in range(0, K // 32):
        xs = tl.load(x + xrows[:, None].to(tl.int64) * K + s * 32 + tl.arange(0, 32)[None, :],
                     mask=m_mask[:, None], other=0.0).to(tl.float32)  # [BM, 32]
        ws = _subblock(w, rows, n_mask, row_bytes, s, QTYPE)  # [BN, 32]
        acc += tl.dot(xs, tl.trans(ws), input_precision="ieee")
    tl.store(y + xrows[:, None].to(tl.int64) * N + rows[None, :], acc, mask=m_mask[:, None] & n_mask[None, :])


GEMV_MAX_ROWS = 8
"""Below this many activation rows the GEMV form (each weight tile read once per row: decode)."""
TILE_N, TILE_M = 32, 16
"""A program's output features (both forms) and activation rows (the tiled form)."""


def gguf_matmul(x: torch.Tensor, w: torch.Tensor, qtype: Q, n: int, k: int, form: str | None = None,
                bn: int | None = None, bm: int | None = None) -> torch.Tensor:
    """x: f32/f16 [M, K], w: uint8 [N, bytes per row] GGUF blocks -> f32 [M, N].
    form: "gemv" | "tiled", or None to pick by row count; bn, bm: the tiles (None: TILE_N, TILE_M)."""
    bn, bm = bn or TILE_N, bm or TILE_M
    if qtype not in QTYPES:
        raise UnsupportedError(f"the Triton GGUF matmul reads {', '.join(q.name for q in QTYPES)}, not {qtype.name}")
    fmt = WEIGHT_FORMATS[qtype]
    row_bytes = k // fmt.block_size * fmt.type_size
    if w.dtype != torch.uint8 or tuple(w.shape) != (n, row_bytes):
        raise UnsupportedError(f"weight: uint8 [{n}, {row_bytes}] expected for {qtype.name} rows of {k}, "
                               f"got {w.dtype} {list(w.shape)}")
    x = x.contiguous()
    m = x.shape[0]
    y = torch.empty(m, n, dtype=torch.float32, device=x.device)
    form = form or ("gemv" if m < GEMV_MAX_ROWS else "tiled")
    args = dict(x=x, w=w, y=y, M=m, N=n, K=k, row_bytes=row_bytes)
    if form == "gemv":
        launch(gguf_gemv, (m, triton.cdiv(n, bn)), args, {"y": Tiles((1, bn), (0, 1))}, ("x", "w"),
               QTYPE=int(qtype), BN=bn)
    else:
        launch(gguf_tiled, (triton.cdiv(m, bm), triton.cdiv(n, bn)), args, {"y": Tiles((bm, bn), (0, 1))},
               ("x", "w"), QTYPE=int(qtype), BM=bm, BN=bn)
    return y
