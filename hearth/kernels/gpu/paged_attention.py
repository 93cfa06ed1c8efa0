"""Attention over the paged KV cache, and the KV write, in Triton: the CUDA backend's (DESIGN.md, "Devices").

Decodes and short chunks: one program per (query row, head) walks the row's sequence block by block
through its block table with an online softmax (flash-decoding's recurrence). Prefill chunks (16 rows
or more, pages of 16 or more): one program per 16 query rows and head, scores in 16 x page tiles on
tl.dot (flash attention's recurrence). Both: causal, sliding window (keys less than `window`
positions back), soft-capped scores, grouped-query heads; the row-wise kernel also takes token trees
(speculative decoding: a node row sees the keys before the tree and its ancestors'). The quantized
KV formats: hearth.kernels.gpu.quantized_attention. The torch twin is hearth.kernels.attention.paged_attention_torch; the tests run both in
Triton's interpreter on the CPU."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hearth.errors import UnsupportedError
from hearth.kernels.gpu.launch import Rows, Tiles, launch
from hearth.kernels.step_metadata import AttentionMetadata


@triton.jit
def paged_attention_kernel(q, kv, out, row_seq, row_pos, tables, table_stride, tree, tree_stride, s_kv, s_tok, s_head,
                           scale, softcap, window, H, GROUP, D: tl.constexpr, BS: tl.constexpr, TREE: tl.constexpr):
    """Program (t, h): out[t, h] = softmax(q[t, h] . K^T) V over row t's visible keys.

    A token tree's node row (TREE, tree[t, 0] >= 0: its position along its path, the first node's
    position `base`, then the slots of its path's keys) reads the keys from `base` on at its path's
    slots instead of the table's: the same keys, in the same blocks and order, as a decode of its path."""
    t, h = tl.program_id(0), tl.program_id(1)
    seq, pos = tl.load(row_seq + t), tl.load(row_pos + t)
    base = pos + 1  # keys at base or later come from the path (none for an ordinary row)
    if TREE:
        node = tl.load(tree + t.to(tl.int64) * tree_stride)
        if node >= 0:
            pos = node.to(tl.int32)
            base = tl.load(tree + t.to(tl.int64) * tree_stride + 1).to(tl.int32)
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
        slot = blk * BS + tok  # [BS]
        if TREE:
            on_path = visible & (kpos >= base)
            path = tl.load(tree + t.to(tl.int64) * tree_stride + 2 + tl.maximum(kpos - base, 0), mask=on_path, other=0)
            slot = tl.where(on_path, path, slot)
        at = slot[:, None] * s_tok + kvh * s_head + d[None, :]  # [BS, D]
        k = tl.load(kv + at, mask=visible[:, None], other=0.0).to(tl.float32)
        v = tl.load(kv + s_kv + at, mask=visible[:, None], other=0.0).to(tl.float32)
        m_i, l_i, acc = online_softmax_step(qv, k, v, visible, m_i, l_i, acc, scale, softcap)
    tl.store(out + (t.to(tl.int64) * H + h) * D + d, acc / l_i)


@triton.jit
def online_softmax_step(qv, k, v, visible, m_i, l_i, acc, scale, softcap):
    """One block of keys into a row's running softmax: qv [D], k, v [BS, D] f32, visible [BS];
    (max, sum, acc [D]) -> updated (flash-decoding's recurrence)."""
    s = tl.sum(k * qv[None, :], axis=1) * scale  # [BS]
    if softcap > 0:
        s = (2.0 * tl.sigmoid(2.0 * s / softcap) - 1.0) * softcap  # softcap * tanh(s / softcap)
    s = tl.where(visible, s, -float("inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=0))
    p = tl.exp(s - m_new)
    alpha = tl.exp(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, axis=0)
    acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
    return m_new, l_i, acc


@triton.jit
def flash_softmax_step(s, kpos, pos, m_i, l_i, scale, softcap, window):
    """One page of raw scores s [BM, BS] (keys at kpos [BS], rows at pos [BM]) into the tile's running
    softmax (m_i, l_i [BM]) -> (p [BM, BS], alpha [BM]: the old accumulator's rescale, m_i, l_i):
    flash attention's recurrence, causal and windowed."""
    s = s * scale
    if softcap > 0:
        s = (2.0 * tl.sigmoid(2.0 * s / softcap) - 1.0) * softcap  # softcap * tanh(s / softcap)
    visible = kpos[None, :] <= pos[:, None]
    if window > 0:
        visible = visible & ((pos[:, None] - kpos[None, :]) < window)
    s = tl.where(visible, s, -float("inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    m_safe = tl.where(m_new == -float("inf"), 0.0, m_new)  # a row with no visible key yet
    p = tl.exp(s - m_safe[:, None])
    alpha = tl.exp(m_i - m_safe)
    return p, alpha, m_new, l_i * alpha + tl.sum(p, axis=1)


@triton.jit
def flash_prefill_kernel(q, kv, out, table, n_q, ctx, s_kv, s_blk, s_tok, s_head, scale, softcap, window, H, GROUP,
                         D: tl.constexpr, BS: tl.constexpr, BM: tl.constexpr):
    """Program (m, h): query rows m*BM .. m*BM + BM - 1 of one sequence's chunk (q, out: its rows
    [n_q, H, D]; its context ctx tokens, the chunk its last n_q), head h: BM x BS score tiles on
    tl.dot, a page of keys at a time, with the online softmax."""
    pm, h = tl.program_id(0), tl.program_id(1)
    rows = pm * BM + tl.arange(0, BM)
    live = rows < n_q
    pos = ctx - n_q + rows  # [BM]
    d = tl.arange(0, D)
    at_q = (rows[:, None].to(tl.int64) * H + h) * D + d[None, :]
    qt = tl.load(q + at_q, mask=live[:, None], other=0.0).to(tl.float32)  # [BM, D]
    kvh = h // GROUP
    hi = tl.minimum(ctx - n_q + (pm + 1) * BM, ctx) - 1  # the last position a row of this tile sees
    lo = tl.maximum(ctx - n_q + pm * BM - window + 1, 0) if window > 0 else 0
    m_i = tl.full((BM,), -float("inf"), tl.float32)
    l_i = tl.zeros((BM,), dtype=tl.float32)
    acc = tl.zeros((BM, D), dtype=tl.float32)
    for b in range(lo // BS, hi // BS + 1):
        blk = tl.load(table + b).to(tl.int64)
        tok = tl.arange(0, BS)
        kpos = b * BS + tok
        at = blk * s_blk + tok[:, None] * s_tok + kvh * s_head + d[None, :]  # [BS, D]
        live_k = ((kpos < ctx) & (kpos >= lo))[:, None]  # slots past the context or before the window: stale
        k = tl.load(kv + at, mask=live_k, other=0.0).to(tl.float32)
        v = tl.load(kv + s_kv + at, mask=live_k, other=0.0).to(tl.float32)
        s = tl.dot(qt, tl.trans(k), input_precision="ieee")  # [BM, BS]
        p, alpha, m_i, l_i = flash_softmax_step(s, kpos, pos, m_i, l_i, scale, softcap, window)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
    tl.store(out + at_q, acc / l_i[:, None], mask=live[:, None])


FLASH_MIN_ROWS = 16
"""Sequences with this many new tokens (prefill chunks) attend in BM x BS tiles; fewer, row by row."""
BM = 16


def row_tensors(meta: AttentionMetadata, seqs: list[int], device) -> tuple[torch.Tensor, ...]:
    """For the rows of sequences `seqs`: their flat row ids, sequence and position; per sequence its
    block table (padded): int32 on the device; and the rows' tree layout (AttentionMetadata.tree_rows:
    int64 [rows, 2 + depth], -1 for an ordinary row; [rows, 2] of -1 without trees). Once per step."""
    key = ("triton_rows", str(device), tuple(seqs))
    if key not in meta.memo.kernel_args:
        ids, seq, pos = [], [], []
        for i in seqs:
            a, b = meta.query_start_loc[i], meta.query_start_loc[i + 1]
            ids += range(a, b)
            seq += [i] * (b - a)
            pos += range(meta.seq_lens[i] - (b - a), meta.seq_lens[i])
        width = max(map(len, meta.block_tables))
        tables = [t + [0] * (width - len(t)) for t in meta.block_tables]
        as_i32 = lambda v: torch.tensor(v, dtype=torch.int32, device=device)  # noqa: E731
        tree = meta.tree_rows()
        tree = torch.full((len(ids), 2), -1, dtype=torch.long) if tree is None else tree[ids]
        meta.memo.kernel_args[key] = (torch.tensor(ids, dtype=torch.long, device=device), as_i32(seq), as_i32(pos),
                                      as_i32(tables), tree.to(device))
    return meta.memo.kernel_args[key]


def paged_attention(q: torch.Tensor, kv_cache: torch.Tensor, meta: AttentionMetadata, scale: float,
                    window: int = 0, softcap: float = 0.0) -> torch.Tensor:
    """q: [T, heads, head_dim]; kv_cache: [2, num_blocks, block_size, kv_heads, head_dim] -> f32 [T, heads, head_dim]."""
    T, H, D = q.shape
    _, _, bs, kvh, _ = kv_cache.shape
    if D & (D - 1) or bs & (bs - 1) or D < 16:
        raise UnsupportedError(f"the Triton attention needs power-of-two head_dim >= 16 and block_size, not {D} and {bs}")
    q = q.contiguous()
    qsl = meta.query_start_loc
    n_q = [b - a for a, b in zip(qsl, qsl[1:])]
    long = [i for i, n in enumerate(n_q) if n >= FLASH_MIN_ROWS and bs >= 16 and i not in meta.trees]
    short = [i for i in range(len(n_q)) if i not in long]
    geometry = dict(s_kv=kv_cache.stride(0), s_blk=kv_cache.stride(1), s_tok=kv_cache.stride(2), s_head=kv_cache.stride(3),
                    scale=scale, softcap=softcap, window=window, H=H, GROUP=H // kvh)
    out = torch.empty(T, H, D, dtype=torch.float32, device=q.device)
    if short:
        ids, row_seq, row_pos, tables, tree = row_tensors(meta, short, q.device)
        few = out if not long else torch.empty(ids.numel(), H, D, dtype=torch.float32, device=q.device)
        rows_q = q if not long else q[ids]
        if kv_cache.stride(1) != bs * kv_cache.stride(2):
            raise UnsupportedError("the Triton attention reads a cache whose blocks are contiguous slots")
        args = dict(q=rows_q, kv=kv_cache, out=few, row_seq=row_seq, row_pos=row_pos, tables=tables,
                    table_stride=tables.stride(0), tree=tree, tree_stride=tree.stride(0),
                    **{k: v for k, v in geometry.items() if k != "s_blk"})
        launch(paged_attention_kernel, (ids.numel(), H), args, {"out": Tiles((1, 1, D), (0, 1, None))},
               ("q", "kv", "row_seq", "row_pos", "tables", "tree"), D=D, BS=bs, TREE=bool(meta.trees))
        if long:
            out[ids] = few
    for i in long:
        key = ("triton_table", i, str(q.device))  # built once per step, read by every layer
        if key not in meta.memo.kernel_args:
            meta.memo.kernel_args[key] = torch.tensor(meta.block_tables[i], dtype=torch.int32, device=q.device)
        table = meta.memo.kernel_args[key]
        a, b = qsl[i], qsl[i + 1]
        args = dict(q=q[a:b], kv=kv_cache, out=out[a:b], table=table, n_q=b - a, ctx=meta.seq_lens[i], **geometry)
        launch(flash_prefill_kernel, (triton.cdiv(b - a, BM), H), args, {"out": Tiles((BM, 1, D), (0, 1, None))},
               ("q", "kv", "table"), D=D, BS=bs, BM=BM)
    return out


@triton.jit
def kv_write_kernel(kv, slots, cache, s_kv_in, s_tok_in, s_head_in, s_kv, s_slot, s_head, D: tl.constexpr):
    """Program (t, h): token t's K and V of kv head h ([D] each) into its cache slot."""
    t, h = tl.program_id(0), tl.program_id(1)
    slot = tl.load(slots + t).to(tl.int64)
    d = tl.arange(0, D)
    for i in range(2):
        x = tl.load(kv + t.to(tl.int64) * s_tok_in + i * s_kv_in + h * s_head_in + d)
        tl.store(cache + i * s_kv + slot * s_slot + h * s_head + d, x.to(cache.dtype.element_ty))


def write_kv(kv_cache: torch.Tensor, kv: torch.Tensor, meta: AttentionMetadata) -> None:
    """kv: [T, 2, kv_heads, head_dim] -> the new tokens' slots (meta.slot_mapping) of kv_cache
    [2, num_blocks, block_size, kv_heads, head_dim]."""
    write_rows(kv_cache, kv, meta.slot_mapping.to(kv.device))


def write_rows(pages: torch.Tensor, kv: torch.Tensor, slots: torch.Tensor) -> None:
    """kv: [T, 2, kv_heads, head_dim] -> flat slots (int64 [T], on the device) of pages
    [2, num_blocks, block_size, kv_heads, head_dim], cast to its dtype (a cache, or a quantized cache's
    f16 staging)."""
    _, nb, bs, kvh, d = pages.shape
    if d & (d - 1):
        raise UnsupportedError(f"the Triton KV write needs a power-of-two head_dim, not {d}")
    flat = pages.view(2, nb * bs, kvh, d)
    kv = kv.contiguous()
    args = dict(kv=kv, slots=slots, cache=flat, s_kv_in=kv.stride(1), s_tok_in=kv.stride(0), s_head_in=kv.stride(2),
                s_kv=flat.stride(0), s_slot=flat.stride(1), s_head=flat.stride(2))
    launch(kv_write_kernel, (kv.shape[0], kvh), args, {"cache": Rows("slots", dim=1, split=((1, 2, 1),))},
           ("kv", "slots"), D=d)
