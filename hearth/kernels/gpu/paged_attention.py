"""Attention over the paged KV cache, and the KV write, in Triton: the CUDA backend's (DESIGN.md, "Devices").

One program per (query row, head) walks the row's sequence block by block through its block table
with an online softmax (flash-decoding's recurrence), so decodes and prefill chunks of any length
run the same code: causal, sliding window (keys less than `window` positions back), soft-capped
scores, grouped-query heads. Token trees (speculative decoding) and the quantized KV formats are not
here yet. The torch twin is hearth.kernels.attention.paged_attention_torch; the tests run both in
Triton's interpreter on the CPU."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hearth.errors import UnsupportedError
from hearth.kernels.gpu.launch import Rows, Tiles, launch
from hearth.kernels.step_metadata import AttentionMetadata


@triton.jit
def paged_attention_kernel(q, kv, out, row_seq, row_pos, tables, seq_lens, table_stride, s_kv, s_blk, s_tok, s_head,
                           scale, softcap, window, H, GROUP, D: tl.constexpr, BS: tl.constexpr):
    """Program (t, h): out[t, h] = softmax(q[t, h] . K^T) V over row t's visible keys."""
    t, h = tl.program_id(0), tl.program_id(1)
    seq, pos = tl.load(row_seq + t), tl.load(row_pos + t)
    d = tl.arange(0, D)
    qv = tl.load(q + (t.to(tl.int64) * H + h) * D + d).to(tl.float32)
    kvh = h // GROUP
    start = tl.maximum(pos - window + 1, 0) if window > 0 else 0
    m_i = -float("inf")
    l_i = 0.0
    acc = tl.zeros((D,), dtype=tl.float32)
    for b in range(start // BS, pos // BS + 1):
        blk = tl.load(tables + seq.to(tl.int64) * table_stride + b).to(tl.int64)
        tok = tl.arange(0, BS)
        kpos = b * BS + tok
        visible = (kpos <= pos) & (kpos >= start)
        at = blk * s_blk + tok[:, None] * s_tok + kvh * s_head + d[None, :]  # [BS, D]
        k = tl.load(kv + at, mask=visible[:, None], other=0.0).to(tl.float32)
        v = tl.load(kv + s_kv + at, mask=visible[:, None], other=0.0).to(tl.float32)
        s = tl.sum(k * qv[None, :], axis=1) * scale  # [BS]
        if softcap > 0:
            s = (2.0 * tl.sigmoid(2.0 * s / softcap) - 1.0) * softcap  # softcap * tanh(s / softcap)
        s = tl.where(visible, s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        p = tl.exp(s - m_new)
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        m_i = m_new
    tl.store(out + (t.to(tl.int64) * H + h) * D + d, acc / l_i)


def _rows(meta: AttentionMetadata, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row its sequence and position; per sequence its block table (padded) and length: int32 on
    the device, built once per step."""
    key = ("triton_rows", str(device))
    if key not in meta.memo.kernel_args:
        meta.memo.kernel_args[key] = _build_rows(meta, device)
    return meta.memo.kernel_args[key]


def _build_rows(meta: AttentionMetadata, device) -> tuple[torch.Tensor, ...]:
    seq, pos = [], []
    for i, (a, b) in enumerate(zip(meta.query_start_loc, meta.query_start_loc[1:])):
        seq += [i] * (b - a)
        pos += range(meta.seq_lens[i] - (b - a), meta.seq_lens[i])
    width = max(map(len, meta.block_tables))
    tables = [t + [0] * (width - len(t)) for t in meta.block_tables]
    as_i32 = lambda v: torch.tensor(v, dtype=torch.int32, device=device)  # noqa: E731
    return as_i32(seq), as_i32(pos), as_i32(tables), as_i32(meta.seq_lens)


def paged_attention(q: torch.Tensor, kv_cache: torch.Tensor, meta: AttentionMetadata, scale: float,
                    window: int = 0, softcap: float = 0.0) -> torch.Tensor:
    """q: [T, heads, head_dim]; kv_cache: [2, num_blocks, block_size, kv_heads, head_dim] -> f32 [T, heads, head_dim]."""
    if meta.trees:
        raise UnsupportedError("the Triton attention has no token-tree masks yet")
    T, H, D = q.shape
    _, _, bs, kvh, _ = kv_cache.shape
    if D & (D - 1) or bs & (bs - 1):
        raise UnsupportedError(f"the Triton attention needs power-of-two head_dim and block_size, not {D} and {bs}")
    row_seq, row_pos, tables, seq_lens = _rows(meta, q.device)
    out = torch.empty(T, H, D, dtype=torch.float32, device=q.device)
    args = dict(q=q.contiguous(), kv=kv_cache, out=out, row_seq=row_seq, row_pos=row_pos, tables=tables, seq_lens=seq_lens,
                table_stride=tables.stride(0), s_kv=kv_cache.stride(0), s_blk=kv_cache.stride(1), s_tok=kv_cache.stride(2),
                s_head=kv_cache.stride(3), scale=scale, softcap=softcap, window=window, H=H, GROUP=H // kvh)
    launch(paged_attention_kernel, (T, H), args, {"out": Tiles((1, 1, D), (0, 1, None))},
           ("q", "kv", "row_seq", "row_pos", "tables", "seq_lens"), D=D, BS=bs)
    return out


@triton.jit
def kv_write_kernel(kv, slots, cache, s_kv_in, s_tok_in, s_kv, s_slot, D: tl.constexpr, KVH: tl.constexpr):
    """Program t: token t's K and V ([KVH, D] each) into its cache slot."""
    t = tl.program_id(0)
    slot = tl.load(slots + t).to(tl.int64)
    e = tl.arange(0, KVH)[:, None] * D + tl.arange(0, D)[None, :]
    for i in range(2):
        x = tl.load(kv + t.to(tl.int64) * s_tok_in + i * s_kv_in + e)
        tl.store(cache + i * s_kv + slot * s_slot + e, x.to(cache.dtype.element_ty))


def write_kv(kv_cache: torch.Tensor, kv: torch.Tensor, meta: AttentionMetadata) -> None:
    """kv: [T, 2, kv_heads, head_dim] -> the new tokens' slots (meta.slot_mapping) of kv_cache
    [2, num_blocks, block_size, kv_heads, head_dim]."""
    _, nb, bs, kvh, d = kv_cache.shape
    if d & (d - 1) or kvh & (kvh - 1):
        raise UnsupportedError(f"the Triton KV write needs power-of-two kv_heads and head_dim, not {kvh} and {d}")
    flat = kv_cache.view(2, nb * bs, kvh, d)
    kv = kv.contiguous()
    slots = meta.slot_mapping.to(kv.device)
    args = dict(kv=kv, slots=slots, cache=flat, s_kv_in=kv.stride(1), s_tok_in=kv.stride(0), s_kv=flat.stride(0),
                s_slot=flat.stride(1))
    launch(kv_write_kernel, (kv.shape[0],), args, {"cache": Rows("slots", dim=1)}, ("kv", "slots"), D=d, KVH=kvh)
