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
"""Rows are padded to whole blocks of 64 (the widest block any packed layout below uses)."""
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
    blob: torch.Tensor | None = None
    """uint8 [nbytes]: the one buffer `packed` and `scale_zero` are views of (what a cache stores)."""

    @property
    def nbytes(self) -> int:
        return self.packed.nbytes + self.scale_zero.nbytes

    @staticmethod
    def blob_bytes(n: int, k: int, planes: int) -> int:
        n_pad = -(-n // ROW_BLOCK) * ROW_BLOCK
        return n_pad * planes * k // 2 + 2 * (planes * k // GROUP) * n_pad * 2

    @classmethod
    def from_blob(cls, blob: torch.Tensor, n: int, k: int, planes: int) -> Int4Weight:
        """The weight whose bytes are blob (uint8 [blob_bytes(n, k, planes)]): packed codes, then scales."""
        n_pad = -(-n // ROW_BLOCK) * ROW_BLOCK
        cut = n_pad * planes * k // 2
        packed = blob[:cut].view(n_pad, planes * k // 2)
        scale_zero = blob[cut:].view(torch.bfloat16).view(planes * k // GROUP, n_pad, 2)
        return cls(packed, scale_zero, n, k, planes, blob)


def pack_int4(n: int, k: int, planes: int,
              chunks: Iterable[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> Int4Weight:
    """Row chunks (q: uint8 [rows, P, K] in 0..15; scale, zero: f32 [rows, P, K / 32]) that stack
    into one [n, K] weight -> Int4Weight. Chunks keep temporaries small (a 262k-row head); the
    result is allocated first, so the allocator can reuse the temporaries' memory."""
    n_pad = -(-n // ROW_BLOCK) * ROW_BLOCK
    w = Int4Weight.from_blob(torch.empty(Int4Weight.blob_bytes(n, k, planes), dtype=torch.uint8), n, k, planes)
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
    rows, layout = q.shape[0], _layout()
    for r in range(0, rows, PACK_ROWS):
        qr = q[r:r + PACK_ROWS].reshape(-1, w.planes * w.k)  # [rows, P*K]: plane p's codes at [p*K, (p+1)*K)
        w.packed[at + r:at + r + qr.shape[0]] = _torch_pack(qr) if layout is None else _pack(qr, layout)
    w.scale_zero[:, at:at + rows, 0] = scale.reshape(rows, -1).T
    w.scale_zero[:, at:at + rows, 1] = zero.reshape(rows, -1).T


def int4_matmul(x: torch.Tensor, w: Int4Weight) -> torch.Tensor:
    """x: bf16 [M, K] -> bf16 [M, N] on the int4pack kernel (fast for small M: decode)."""
    if w.planes > 1:
        x = x.repeat(1, w.planes)  # [M, P*K]: plane p meets the same activations
    y = _int4pack_mm(x, w.packed, GROUP, w.scale_zero)
    return y if w.packed.shape[0] == w.n else y[:, :w.n]


LAYOUTS = ((64, 2), (32, 2), (32, 3))
"""(B, d): bytes [N / B, K, B / 2] per block of B rows; d = 2: byte j holds row j in its low nibble and
row j + B / 2 in its high one; d = 3: byte j holds rows 2j and 2j + 1. torch's packer writes the one
of its ATen CPU capability: AVX-512 (64, 2), AVX2 (32, 2), no SIMD (32, 3); checked on a probe."""


def _layout() -> tuple[int, int] | None:
    """The layout torch's packer writes in this process (read off a probe, once), or None when none of
    LAYOUTS reproduces the probe: then no bf16 expansion (dense_expansion() is False), and torch packs."""
    global _found
    if _found is False:
        g = torch.Generator().manual_seed(0)
        q = torch.randint(0, 16, (ROW_BLOCK, 2 * GROUP), dtype=torch.uint8, generator=g)
        packed = _torch_pack(q)
        _found = next((lay for lay in LAYOUTS if torch.equal(_unpack(packed, lay, 0, ROW_BLOCK // lay[0]).T, q)
                       and torch.equal(_pack(q, lay), packed)), None)
    return _found


_found: tuple[int, int] | None | bool = False


def _torch_pack(q: torch.Tensor) -> torch.Tensor:
    """uint8 codes [rows, K] -> torch's packed bytes [rows, K / 2] (its packer takes int32 codes)."""
    return torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.int(), 2)


def _pack(q: torch.Tensor, layout: tuple[int, int]) -> torch.Tensor:
    """_torch_pack in a layout of LAYOUTS, in three uint8 passes (~4x faster than the int32 round trip)."""
    (block, dim), (rows, k) = layout, q.shape
    q = q.view(rows // block, 2, block // 2, k) if dim == 2 else q.view(rows // block, block // 2, 2, k)
    lo, hi = q.unbind(dim - 1)  # [nb, B/2, K]: the rows of each byte's low and high nibble
    return (lo | (hi << 4)).transpose(1, 2).reshape(rows, k // 2)  # [nb, K, B/2] bytes


def _unpack(packed: torch.Tensor, layout: tuple[int, int], b0: int, b1: int) -> torch.Tensor:
    """The 4-bit codes of row blocks [b0, b1) of a packed weight: uint8 [P*K, (b1 - b0) * B]."""
    (block, dim), (n_pad, pk2) = layout, packed.shape
    bt = packed.view(n_pad // block, 2 * pk2, block // 2)[b0:b1].transpose(0, 1)  # [P*K, nb, B/2]
    return torch.stack([bt & 0x0F, bt >> 4], dim=dim).view(2 * pk2, -1)


def dense_expansion() -> bool:
    """int4_dequant_t knows the packed layout of this CPU's kernel (else multiply with int4_matmul)."""
    return _layout() is not None


def int4_dequant_t(w: Int4Weight, rows: slice = slice(None)) -> torch.Tensor:
    """The weight's rows `rows` as bf16 W.T: [K, len(rows)], for a dense (AMX) matmul.
    One rounding per plane term: sum_p of s_p * (q_p - 8) is accumulated plane by plane."""
    layout = _layout()
    if layout is None:
        raise RuntimeError("int4_dequant_t: unknown int4pack layout on this CPU (check dense_expansion())")
    block = layout[0]
    start, stop, _ = rows.indices(w.n)
    b0, b1 = start // block, -(-stop // block)
    cols, groups = (b1 - b0) * block, w.k // GROUP
    digits = _unpack(w.packed, layout, b0, b1).view(torch.int8).sub_(8)  # signed 4-bit digits
    q = digits.view(w.planes, groups, GROUP, cols).to(torch.bfloat16)
    sz = w.scale_zero[:, b0 * block:b1 * block].view(w.planes, groups, 1, cols, 2)
    # contiguous copies of the (small) scales: addcmul is ~4x slower on the interleaved pairs
    scale = sz[..., 0].contiguous()  # [P, G, 1, cols]
    zero = sz[0, ..., 1] if w.planes == 1 else sz[..., 1].sum(0)  # [G, 1, cols]
    wt = torch.addcmul(zero, q[0], scale[0])  # [G, 32, cols]
    for p in range(1, w.planes):
        wt.addcmul_(q[p], scale[p])
    off = start - b0 * block
    return wt.view(w.k, cols)[:, off:off + stop - start]
