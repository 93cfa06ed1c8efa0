"""Reference (torch) dequantization of GGUF tensor types: raw uint8 blocks -> float32.

Every block type is written in one "affine" form: each group of `group_size` weights is
`w = scale * q + offset` with unsigned integer codes `q < 2**q_bits`. Products and sums happen in
the same order as gguf-py's `quants.py` (and are exact where gguf-py's are), so the result is
bit-identical to `gguf.quants.dequantize`. The same decoded (q, scale, offset) feed the repackers
of the fast kernels (hearth.layers.repack), so there is one decoder per format. Each decoder is the
torch twin of one hearth.formats.weights record, from which it takes its block shape and codes.
"""

from __future__ import annotations

import warnings
from typing import ClassVar

import numpy as np
import torch
from gguf import GGMLQuantizationType as Q

from hearth.errors import UnsupportedError
from hearth.formats.weights import IQ4_KVALUES, MXFP4_KVALUES, QK_K, WEIGHT_FORMATS, WeightFormat


class BlockFormat:
    """The torch decoder of one GGUF tensor type. Subclasses register themselves with `qtype=` and
    take the type's facts from its record (hearth.formats.weights)."""

    qtype: ClassVar[Q]
    record: ClassVar[WeightFormat]
    # copied from `record` (see WeightFormat for what each means)
    block_size: ClassVar[int]
    type_size: ClassVar[int]
    group_size: ClassVar[int] = 0
    q_bits: ClassVar[int] = 0
    zero_code: ClassVar[int | None] = None

    registry: ClassVar[dict[Q, type[BlockFormat]]] = {}

    def __init_subclass__(cls, qtype: Q, **kw):
        super().__init_subclass__(**kw)
        r = cls.record = WEIGHT_FORMATS[qtype]  # a decoder without a record is a bug: KeyError at import
        cls.qtype, cls.block_size, cls.type_size = qtype, r.block_size, r.type_size
        cls.group_size, cls.q_bits, cls.zero_code = r.group_size, r.q_bits, r.zero_code
        BlockFormat.registry[qtype] = cls

    @classmethod
    def affine(cls, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """b: uint8 [nb, type_size] -> q: uint8 [nb, block_size], scale, offset: f32 [nb, groups]."""
        raise NotImplementedError

    @classmethod
    def dequantize_blocks(cls, b: torch.Tensor) -> torch.Tensor:  # -> f32 [nb, block_size]
        q, scale, offset = cls.affine(b)
        nb, g = scale.shape
        q, scale = q.view(nb, g, -1).float(), scale.view(nb, g, 1)
        if cls.zero_code is not None:  # same expression as gguf-py, so even signed zeros agree
            return (scale * (q - cls.zero_code)).view(nb, cls.block_size)
        # two separately rounded ops (no fused multiply-add), like numpy in gguf-py
        return (scale * q + offset.view(nb, g, 1)).view(nb, cls.block_size)


# ---- byte helpers (b: uint8 [nb, type_size]) ----

def _f16(b: torch.Tensor, at: int) -> torch.Tensor:  # -> f32 [nb, 1]
    return b[:, at:at + 2].contiguous().view(torch.float16).float()


def _nibbles(qs: torch.Tensor) -> torch.Tensor:
    """uint8 [nb, n, 16*c] -> [nb, n, 2, 16*c]: low nibbles then high nibbles (ggml's order)."""
    return torch.stack([qs & 0x0F, qs >> 4], dim=-2)


def _bits(x: torch.Tensor, shifts: list[int], mask: int) -> torch.Tensor:
    """x: uint8 [..., L] -> [..., len(shifts), L] with (x >> s) & mask per shift."""
    s = torch.tensor(shifts, dtype=torch.uint8).view(-1, 1)
    return (x.unsqueeze(-2) >> s) & mask


def _qh32(b: torch.Tensor, at: int) -> torch.Tensor:
    """The 32 high bits of a Q5_0/Q5_1 block (one little-endian uint32) -> uint8 [nb, 32]."""
    return _bits(b[:, at:at + 4], list(range(8)), 1).transpose(1, 2).reshape(-1, 32)


class F32(BlockFormat, qtype=Q.F32):
    @classmethod
    def dequantize_blocks(cls, b):
        return b.contiguous().view(torch.float32)


class F16(BlockFormat, qtype=Q.F16):
    @classmethod
    def dequantize_blocks(cls, b):
        return b.contiguous().view(torch.float16).float()


class BF16(BlockFormat, qtype=Q.BF16):
    @classmethod
    def dequantize_blocks(cls, b):
        return b.contiguous().view(torch.bfloat16).float()


class Q8_0(BlockFormat, qtype=Q.Q8_0):
    @classmethod
    def affine(cls, b):
        d = _f16(b, 0)
        q = (b[:, 2:].view(torch.int8).to(torch.int16) + 128).to(torch.uint8)  # int8 -> 0..255
        return q, d, -128 * d


class Q4_0(BlockFormat, qtype=Q.Q4_0):
    @classmethod
    def affine(cls, b):
        d = _f16(b, 0)
        return _nibbles(b[:, 2:]).reshape(-1, 32), d, -8 * d


class Q4_1(BlockFormat, qtype=Q.Q4_1):
    @classmethod
    def affine(cls, b):
        return _nibbles(b[:, 4:]).reshape(-1, 32), _f16(b, 0), _f16(b, 2)


class Q5_0(BlockFormat, qtype=Q.Q5_0):
    @classmethod
    def affine(cls, b):
        d = _f16(b, 0)
        q = _nibbles(b[:, 6:]).reshape(-1, 32) | (_qh32(b, 2) << 4)
        return q, d, -16 * d


class Q5_1(BlockFormat, qtype=Q.Q5_1):
    @classmethod
    def affine(cls, b):
        q = _nibbles(b[:, 8:]).reshape(-1, 32) | (_qh32(b, 4) << 4)
        return q, _f16(b, 0), _f16(b, 2)


class Q2_K(BlockFormat, qtype=Q.Q2_K):
    # scales[16] qs[64] d dmin; 16 groups of 16, scale nibble | min nibble per group
    @classmethod
    def affine(cls, b):
        sc, d, dmin = b[:, :16], _f16(b, 80), _f16(b, 82)
        q = _bits(b[:, 16:80].reshape(-1, 2, 32), [0, 2, 4, 6], 3)  # [nb, half, shift, 32]
        return q.reshape(-1, QK_K), d * (sc & 0x0F).float(), -(dmin * (sc >> 4).float())


def _q3k_scales(s: torch.Tensor) -> torch.Tensor:
    """12 bytes -> 16 signed 6-bit scales: low nibbles in bytes 0..7, high 2-bit pairs in 8..11."""
    lo = torch.cat([s[:, :8] & 0x0F, s[:, :8] >> 4], dim=1)  # [nb, 16]
    hi = _bits(s[:, 8:12], [0, 2, 4, 6], 3).reshape(-1, 16)
    return (lo | (hi << 4)).to(torch.int8) - 32


class Q3_K(BlockFormat, qtype=Q.Q3_K):
    # hmask[32] qs[64] scales[12] d; w = d*sc*(q2 - 4*(1 - hbit)) = d*sc*(q2 + 4*hbit) - 4*d*sc
    @classmethod
    def affine(cls, b):
        dl = _f16(b, 108) * _q3k_scales(b[:, 96:108]).float()
        low = _bits(b[:, 32:96].reshape(-1, 2, 32), [0, 2, 4, 6], 3).reshape(-1, QK_K)
        high = _bits(b[:, :32], list(range(8)), 1).reshape(-1, QK_K)
        return low | (high << 2), dl, -4 * dl


def _k4_scale_min(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """12 bytes -> 8 six-bit scales and 8 six-bit mins (ggml's get_scale_min_k4)."""
    d, m, md = s[:, 0:4], s[:, 4:8], s[:, 8:12]
    sc = torch.cat([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], dim=1)
    mn = torch.cat([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], dim=1)
    return sc.float(), mn.float()


class Q4_K(BlockFormat, qtype=Q.Q4_K):
    # d dmin scales[12] qs[128]; 8 groups of 32
    @classmethod
    def affine(cls, b):
        sc, mn = _k4_scale_min(b[:, 4:16])
        q = _nibbles(b[:, 16:].reshape(-1, 4, 32)).reshape(-1, QK_K)
        return q, _f16(b, 0) * sc, -(_f16(b, 2) * mn)


class Q5_K(BlockFormat, qtype=Q.Q5_K):
    # d dmin scales[12] qh[32] qs[128]; high bit of group g is bit g of qh
    @classmethod
    def affine(cls, b):
        sc, mn = _k4_scale_min(b[:, 4:16])
        low = _nibbles(b[:, 48:].reshape(-1, 4, 32)).reshape(-1, QK_K)
        high = _bits(b[:, 16:48], list(range(8)), 1).reshape(-1, QK_K)
        return low | (high << 4), _f16(b, 0) * sc, -(_f16(b, 2) * mn)


class Q6_K(BlockFormat, qtype=Q.Q6_K):
    # ql[128] qh[64] scales[16] (int8) d; 16 groups of 16; w = d*sc*(q - 32)
    @classmethod
    def affine(cls, b):
        dl = _f16(b, 208) * b[:, 192:208].view(torch.int8).float()
        low = _nibbles(b[:, :128].reshape(-1, 2, 64)).reshape(-1, QK_K)  # [half, nibble, 64]
        high = _bits(b[:, 128:192].reshape(-1, 2, 32), [0, 2, 4, 6], 3).reshape(-1, QK_K)
        return low | (high << 4), dl, -32 * dl


_IQ4_CODES = torch.tensor([v + 128 for v in IQ4_KVALUES], dtype=torch.uint8)  # codebook as affine codes (zero 128)


def _iq4_codes(qs: torch.Tensor) -> torch.Tensor:
    """uint8 [nb, n*16] of 4-bit indices (per 32 weights: 16 bytes, low nibbles first) -> codes [nb, n*32]."""
    idx = _nibbles(qs.reshape(qs.shape[0], -1, 16)).reshape(qs.shape[0], -1)
    return _IQ4_CODES[idx.long()]


class IQ4_NL(BlockFormat, qtype=Q.IQ4_NL):
    # d qs[16]; w = d * kvalues[index]
    @classmethod
    def affine(cls, b):
        d = _f16(b, 0)
        return _iq4_codes(b[:, 2:]), d, -128 * d


class IQ4_XS(BlockFormat, qtype=Q.IQ4_XS):
    # d scales_h (u16) scales_l[4] qs[128]; 8 groups of 32, w = d * (ls - 32) * kvalues[index] with the
    # 6-bit ls of group g: nibble g of scales_l (low first), bits 2g..2g+1 of scales_h above it
    @classmethod
    def affine(cls, b):
        lo = _nibbles(b[:, 4:8].unsqueeze(-1)).reshape(-1, 8)  # [nb, byte, nibble] -> group order
        hi = _bits(b[:, 2:4], [0, 2, 4, 6], 3).transpose(1, 2).reshape(-1, 8)  # [nb, byte, shift]
        dl = _f16(b, 0) * ((lo | (hi << 4)).to(torch.int8) - 32).float()
        return _iq4_codes(b[:, 8:]), dl, -128 * dl


_MXFP4_CODES = torch.tensor([v + 12 for v in MXFP4_KVALUES], dtype=torch.uint8)  # doubled E2M1 values + 12


def _e8m0_half(e: torch.Tensor) -> torch.Tensor:
    """uint8 [nb, 1] E8M0 exponents -> f32 2**(e - 128) (half the scale, as the values are doubled), built
    from its bits as ggml_e8m0_to_fp32_half: e < 2 are the subnormals 2**-128 and 2**-127."""
    e = e.to(torch.int32)
    return torch.where(e < 2, 0x00200000 << e, (e - 1) << 23).view(torch.float32)


class MXFP4(BlockFormat, qtype=Q.MXFP4):
    # e (E8M0) qs[16]; weight j < 16 is the low nibble of qs[j], j >= 16 the high nibble of qs[j - 16];
    # w = 2**(e - 128) * kvalues[code]
    @classmethod
    def affine(cls, b):
        d = _e8m0_half(b[:, :1])
        return _MXFP4_CODES[_nibbles(b[:, 1:]).reshape(-1, 32).long()], d, -12 * d


SUPPORTED = tuple(BlockFormat.registry)
"""Every type hearth decodes (tests/formats: exactly the records of hearth.formats.weights)."""


def block_format(qtype: Q) -> type[BlockFormat]:
    try:
        return BlockFormat.registry[qtype]
    except KeyError:
        names = ", ".join(t.name for t in SUPPORTED)
        msg = f"tensor type {qtype.name} is not supported; hearth supports: {names}"
        raise UnsupportedError(msg) from None


def require_supported(name: str, qtype: Q) -> type[BlockFormat]:
    """block_format(qtype), with the tensor's name in the error."""
    try:
        return block_format(qtype)
    except UnsupportedError as e:
        raise UnsupportedError(f"{name}: {e}") from None


def as_bytes(data: np.ndarray | torch.Tensor, qtype: Q) -> torch.Tensor:
    """A tensor's raw data (typed or uint8, possibly a read-only memmap) -> uint8 [rows, bytes_per_row],
    sharing memory (no copy)."""
    if isinstance(data, torch.Tensor):
        raw = data.contiguous().view(torch.uint8)
    else:
        arr = np.ascontiguousarray(data).view(np.uint8)
        with warnings.catch_warnings():  # read-only memmaps: we never write through this view
            warnings.filterwarnings("ignore", message=".*not writable.*")
            raw = torch.from_numpy(arr)
    fmt = block_format(qtype)
    return raw.reshape(-1, raw.shape[-1] if raw.dim() > 1 else fmt.type_size)


def dequantize(data: np.ndarray | torch.Tensor, qtype: Q) -> torch.Tensor:
    """Raw tensor data -> f32 [rows, row_len] (a 1-d tensor comes back as [n_blocks, block_size] rows;
    reshape to the tensor's shape)."""
    fmt = block_format(qtype)
    raw = as_bytes(data, qtype)
    rows, nbytes = raw.shape
    if nbytes % fmt.type_size:
        raise UnsupportedError(f"{qtype.name} row of {nbytes} bytes is not a whole number of blocks")
    blocks = raw.reshape(-1, fmt.type_size)
    return fmt.dequantize_blocks(blocks).reshape(rows, -1)


def affine_rows(raw: torch.Tensor, qtype: Q) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """uint8 [rows, bytes] -> q: uint8 [rows, K], scale, offset: f32 [rows, K / group_size]."""
    fmt = block_format(qtype)
    if not fmt.group_size:
        raise UnsupportedError(f"{qtype.name} has no block-affine form")
    rows = raw.shape[0]
    q, s, o = fmt.affine(raw.reshape(-1, fmt.type_size))
    return q.reshape(rows, -1), s.reshape(rows, -1), o.reshape(rows, -1)
