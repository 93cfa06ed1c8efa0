"""Weight-only 4-bit matmul on torch's CPU int4pack kernel, plus the bf16 expansion used for GEMM.

A weight is P stacked 4-bit "planes" along K, each in groups of 32 along K:
    W[n, k] = sum_p  s_p[n, g] * (q_p[n, k] - 8) + z_p[n, g],   g = k // 32,  q_p in 0..15
which is exactly the formula of `aten._weight_int4pack_mm_for_cpu` (checked by the tests), so one
call computes x @ W.T by feeding x repeated P times along K. Codes wider than 4 bits (Q5_*, Q8_0)
become P = 2 planes of 4-bit digits (hearth.layers.repack.int4_planes).

The kernel's fast path needs bf16 activations and bf16 scales/zeros and returns bf16 (f32 inputs
fall to a scalar path ~27x slower, measured here), so results carry bf16 rounding.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

GROUP = 32
ROW_BLOCK = 64
"""The packed layout is bytes [N / 64, K, 32]: byte j of a 64-row block holds row j in its low nibble
and row j + 32 in its high nibble (torch's _convert_weight_to_int4pack_for_cpu)."""
PACK_ROWS = 1024  # rows packed per call: bounds the int32 temporary the packer wants
# the torch.* binding skips torch.ops' Python dispatch (~1.5 us a call, ~120 calls a decode step)
_int4pack_mm = getattr(torch, "_weight_int4pack_mm_for_cpu", torch.ops.aten._weight_int4pack_mm_for_cpu)


@dataclass(eq=False)
class Int4Weight:
    packed: torch.Tensor
    """uint8 [n_pad, planes * k / 2] in the int4pack layout."""
    scale_zero: torch.Tensor
    """bf16 [planes * k / 32, n_pad, 2]."""
    n: int
    k: int
    planes: int

    @property
    def nbytes(self) -> int:
        return self.packed.nbytes + self.scale_zero.nbytes


def pack_int4(n: int, k: int, planes: int,
              chunks: Iterable[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> Int4Weight:
    """Row chunks (q: uint8 [rows, P, K] in 0..15; scale, zero: f32 [rows, P, K / 32]) that stack
    into one [n, K] weight -> Int4Weight. Chunks keep temporaries small (a 262k-row head); the
    result is allocated first, so the allocator can reuse the temporaries' memory."""
    n_pad = -(-n // ROW_BLOCK) * ROW_BLOCK
    w = Int4Weight(torch.empty(n_pad, planes * k // 2, dtype=torch.uint8),
                   torch.empty(planes * k // GROUP, n_pad, 2, dtype=torch.bfloat16), n, k, planes)
    done, carry = 0, None
    for chunk in chunks:
        if carry is not None:
            chunk = tuple(torch.cat([c, d]) for c, d in zip(carry, chunk))
        cut = chunk[0].shape[0] // ROW_BLOCK * ROW_BLOCK  # whole 64-row blocks pack on their own
        if cut:
            _pack_rows(w, done, *(c[:cut] for c in chunk))
            done += cut
        carry = tuple(c[cut:] for c in chunk) if cut < chunk[0].shape[0] else None
    if carry is not None:  # pad rows: zero scale and zero -> zero weights; outputs are sliced off
        pad, (q, s, z) = n_pad - done - carry[0].shape[0], carry
        _pack_rows(w, done, torch.cat([q, q.new_full((pad, *q.shape[1:]), 8)]),
                   torch.cat([s, s.new_zeros((pad, *s.shape[1:]))]),
                   torch.cat([z, z.new_zeros((pad, *z.shape[1:]))]))
    return w


def _pack_rows(w: Int4Weight, at: int, q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor) -> None:
    rows = q.shape[0]
    for r in range(0, rows, PACK_ROWS):
        qi = q[r:r + PACK_ROWS].reshape(-1, w.planes * w.k).int()  # the packer takes int32 codes
        w.packed[at + r:at + r + qi.shape[0]] = torch.ops.aten._convert_weight_to_int4pack_for_cpu(qi, 2)
    w.scale_zero[:, at:at + rows, 0] = scale.reshape(rows, -1).T
    w.scale_zero[:, at:at + rows, 1] = zero.reshape(rows, -1).T


def int4_matmul(x: torch.Tensor, w: Int4Weight) -> torch.Tensor:
    """x: bf16 [M, K] -> bf16 [M, N] on the int4pack kernel (fast for small M: decode)."""
    if w.planes > 1:
        x = x.repeat(1, w.planes)  # [M, P*K]: plane p meets the same activations
    y = _int4pack_mm(x, w.packed, GROUP, w.scale_zero)
    return y if w.packed.shape[0] == w.n else y[:, :w.n]


def int4_dequant_t(w: Int4Weight, rows: slice = slice(None)) -> torch.Tensor:
    """The weight's rows `rows` as bf16 W.T: [K, len(rows)], for a dense (AMX) matmul.
    One rounding per plane term: sum_p of s_p * (q_p - 8) is accumulated plane by plane."""
    n_pad, pk2 = w.packed.shape
    start, stop, _ = rows.indices(w.n)
    b0, b1 = start // ROW_BLOCK, -(-stop // ROW_BLOCK)
    cols, groups = (b1 - b0) * ROW_BLOCK, w.k // GROUP
    bt = w.packed.view(n_pad // ROW_BLOCK, 2 * pk2, GROUP)[b0:b1].transpose(0, 1)  # [P*K, nb, 32]
    digits = torch.stack([bt & 0x0F, bt >> 4], dim=2).view(torch.int8).sub_(8)  # [P*K, nb, 2, 32]
    q = digits.view(w.planes, groups, GROUP, cols).to(torch.bfloat16)  # signed 4-bit digits
    sz = w.scale_zero[:, b0 * ROW_BLOCK:b1 * ROW_BLOCK].view(w.planes, groups, 1, cols, 2)
    # contiguous copies of the (small) scales: addcmul is ~4x slower on the interleaved pairs
    scale = sz[..., 0].contiguous()  # [P, G, 1, cols]
    zero = sz[0, ..., 1] if w.planes == 1 else sz[..., 1].sum(0)  # [G, 1, cols]
    wt = torch.addcmul(zero, q[0], scale[0])  # [G, 32, cols]
    for p in range(1, w.planes):
        wt.addcmul_(q[p], scale[p])
    off = start - b0 * ROW_BLOCK
    return wt.view(w.k, cols)[:, off:off + stop - start]
