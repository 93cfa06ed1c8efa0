"""The KV write and attention over a quantized paged cache (hearth.kvstore.paged.QuantizedKVCache) in
Triton: the CUDA backend's for fp8_e4m3, q8_0 and q4_0 (codecs: hearth.kernels.gpu.kv_codecs).

The cache keeps the encoded bytes on the device and never expands them: the write stages the rows of
blocks being filled in f16 (the plain KV write kernel, into the staging slots), assembles the blocks a
step fills, keeps them as `fresh` (f16) for this step's queries and encodes them into their block ids.
Attention, one program per (query row, head), walks the row's blocks with the online softmax of
paged_attention_kernel: blocks before its own decoded in registers from their codes, its own block at
full precision (its staging slot, or the fresh copy of a block sealed this step), as the torch twin
(hearth.kernels.attention.paged_attention_quantized_torch) sees them. Prefill chunks (FLASH_MIN_ROWS
rows or more) in flash_prefill_kernel's BM x BS tiles, a block decoded for the rows past it and read in
f16 for the rows in it. No token trees: a quantized cache verifies chains only (Scheduler.set_drafts)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from hearth.errors import UnsupportedError
from hearth.kernels.gpu.kv_codecs import GPU_CODECS, decode_tile, encode_blocks
from hearth.kernels.gpu.launch import Tiles, launch
from hearth.kernels.gpu.paged_attention import (BM, FLASH_MIN_ROWS, flash_softmax_step, online_softmax_step, row_tensors,
                                                write_rows)
from hearth.kernels.step_metadata import AttentionMetadata
from hearth.kvstore.codecs import STAGING_DTYPE


def refusal(codec) -> str | None:
    """Why these kernels cannot hold a cache in this quantized codec (None: they can)."""
    if codec.sink or codec.rotate or codec.k.name != codec.v.name or codec.k.name not in GPU_CODECS:
        return (f"no Triton kernels for the KV format {codec.name} yet: --kv-cache-dtype f16, bf16, "
                f"{', '.join(GPU_CODECS)}")
    return None


@triton.jit
def _f16_tile(buf, slot, s_kv, kvh, live, KVH, BS: tl.constexpr, D: tl.constexpr):
    """K, V [BS, D] f32 of block `slot` of an f16 buffer [2, slots, BS, KVH, D] (staging or fresh)."""
    at = slot.to(tl.int64) * BS * KVH * D + (tl.arange(0, BS)[:, None] * KVH + kvh) * D + tl.arange(0, D)[None, :]
    k = tl.load(buf + at, mask=live, other=0.0).to(tl.float32)
    v = tl.load(buf + s_kv + at, mask=live, other=0.0).to(tl.float32)
    return k, v


@triton.jit
def quantized_attention_kernel(q, out, row_seq, row_pos, row_own, tables, table_stride, staging, fresh, k_codes,
                               k_scales, v_codes, v_scales, s_stage, s_fresh, scale, softcap, window, H, GROUP, KVH,
                               D: tl.constexpr, BS: tl.constexpr, CODEC: tl.constexpr):
    """Program (t, h): out[t, h] = softmax(q[t, h] . K^T) V over row t's visible keys; row_own[t]: where its
    own block's f16 values are (>= 0: that staging slot; -1 - k: block k of fresh)."""
    t, h = tl.program_id(0), tl.program_id(1)
    seq, pos, own = tl.load(row_seq + t), tl.load(row_pos + t), tl.load(row_own + t)
    d = tl.arange(0, D)
    qv = tl.load(q + (t.to(tl.int64) * H + h) * D + d).to(tl.float32)
    kvh = h // GROUP
    start = tl.maximum(pos - window + 1, 0) if window > 0 else 0
    m_i = -float("inf")
    l_i = 0.0
    acc = tl.zeros((D,), dtype=tl.float32)
    for b in range(start // BS, pos // BS + 1):
        kpos = b * BS + tl.arange(0, BS)
        visible = (kpos <= pos) & (kpos >= start)
        live = visible[:, None]
        if b == pos // BS:  # the block being filled (or sealed this step): full precision
            if own >= 0:
                k, v = _f16_tile(staging, own, s_stage, kvh, live, KVH, BS, D)
            else:
                k, v = _f16_tile(fresh, -1 - own, s_fresh, kvh, live, KVH, BS, D)
        else:
            blk = tl.load(tables + seq.to(tl.int64) * table_stride + b).to(tl.int64)
            k = decode_tile(k_codes, k_scales, blk, kvh, live, KVH, BS, D, CODEC)
            v = decode_tile(v_codes, v_scales, blk, kvh, live, KVH, BS, D, CODEC)
        m_i, l_i, acc = online_softmax_step(qv, k, v, visible, m_i, l_i, acc, scale, softcap)
    tl.store(out + (t.to(tl.int64) * H + h) * D + d, acc / l_i)


@triton.jit
def quantized_flash_kernel(q, out, table, refs, first, n_q, ctx, staging, fresh, k_codes, k_scales, v_codes, v_scales,
                           s_stage, s_fresh, scale, softcap, window, H, GROUP, KVH, D: tl.constexpr, BS: tl.constexpr,
                           BM: tl.constexpr, CODEC: tl.constexpr):
    """Program (m, h): query rows m*BM .. m*BM + BM - 1 of one sequence's chunk (q, out: its rows [n_q, H, D];
    its context ctx tokens, the chunk its last n_q), head h, in BM x BS score tiles on tl.dot as
    flash_prefill_kernel. Block b's keys: decoded for the rows past it, its f16 copy refs[b - first]
    (StepPlan.fresh_refs: a staging slot >= 0, or -1 - k: block k of fresh) for the rows in it."""
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
    own_lo, own_hi = (ctx - n_q + pm * BM) // BS, hi // BS  # the blocks of the tile's first and last rows
    mine_of = (pos // BS)[:, None]  # [BM, 1]: each row's own block
    m_i = tl.full((BM,), -float("inf"), tl.float32)
    l_i = tl.zeros((BM,), dtype=tl.float32)
    acc = tl.zeros((BM, D), dtype=tl.float32)
    for b in range(lo // BS, hi // BS + 1):
        kpos = b * BS + tl.arange(0, BS)
        live_k = ((kpos < ctx) & (kpos >= lo))[:, None]  # slots past the context or before the window: stale
        kd = tl.zeros((BS, D), dtype=tl.float32)
        vd = tl.zeros((BS, D), dtype=tl.float32)
        kf = tl.zeros((BS, D), dtype=tl.float32)
        vf = tl.zeros((BS, D), dtype=tl.float32)
        if b < own_hi:  # a row past block b: it is sealed
            blk = tl.load(table + b).to(tl.int64)
            kd = decode_tile(k_codes, k_scales, blk, kvh, live_k, KVH, BS, D, CODEC)
            vd = decode_tile(v_codes, v_scales, blk, kvh, live_k, KVH, BS, D, CODEC)
        if b >= own_lo:  # a row in block b: its full-precision copy
            ref = tl.load(refs + b - first)
            if ref >= 0:
                kf, vf = _f16_tile(staging, ref, s_stage, kvh, live_k, KVH, BS, D)
            else:
                kf, vf = _f16_tile(fresh, -1 - ref, s_fresh, kvh, live_k, KVH, BS, D)
        mine = mine_of == b
        s = tl.where(mine, tl.dot(qt, tl.trans(kf), input_precision="ieee"),
                     tl.dot(qt, tl.trans(kd), input_precision="ieee"))  # [BM, BS]
        p, alpha, m_i, l_i = flash_softmax_step(s, kpos, pos, m_i, l_i, scale, softcap, window)
        pv = tl.dot(tl.where(mine, p, 0.0), vf, input_precision="ieee")
        acc = acc * alpha[:, None] + pv + tl.dot(tl.where(mine, 0.0, p), vd, input_precision="ieee")
    tl.store(out + at_q, acc / tl.where(live, l_i, 1.0)[:, None], mask=live[:, None])  # dead rows may see no key


def _own_refs(meta: AttentionMetadata, seqs: list[int], bs: int, device) -> torch.Tensor:
    """int32 [rows of seqs]: for each row, StepPlan.fresh_refs's entry for the block holding it. Once per step."""
    key = ("quantized_own", str(device), tuple(seqs))
    if key not in meta.memo.kernel_args:
        plan, refs = meta.kv_plan, []
        for i in seqs:
            fresh, first = plan.fresh_refs(i, bs), plan.seqs[i].start // bs
            refs += [fresh[p // bs - first] for p in range(plan.seqs[i].start, meta.seq_lens[i])]
        meta.memo.kernel_args[key] = torch.tensor(refs, dtype=torch.int32, device=device)
    return meta.memo.kernel_args[key]


def _chunk_tensors(meta: AttentionMetadata, i: int, bs: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequence i's block table and its fresh_refs, int32 on the device. Once per step."""
    key = ("quantized_chunk", str(device), i)
    if key not in meta.memo.kernel_args:
        as_i32 = lambda v: torch.tensor(v, dtype=torch.int32, device=device)  # noqa: E731
        meta.memo.kernel_args[key] = (as_i32(meta.block_tables[i]), as_i32(meta.kv_plan.fresh_refs(i, bs)))
    return meta.memo.kernel_args[key]


def quantized_attention(q: torch.Tensor, cache, meta: AttentionMetadata, scale: float, window: int = 0,
                        softcap: float = 0.0) -> torch.Tensor:
    """q: [T, heads, head_dim] over a QuantizedKVCache on q's device -> f32 [T, heads, head_dim]. Sequences
    with FLASH_MIN_ROWS new tokens or more (and blocks of 16 or more) in the flash tiles, the others row-wise."""
    if meta.trees:
        raise UnsupportedError("a quantized KV cache verifies chains only (Scheduler.set_drafts)")
    T, H, D = q.shape
    codec, kvh, bs, qsl = GPU_CODECS[cache.codec.k.name], cache.kv_heads, cache.bs, meta.query_start_loc
    q = q.contiguous()
    long = [i for i in range(len(meta.seq_lens)) if qsl[i + 1] - qsl[i] >= FLASH_MIN_ROWS and bs >= 16]
    short = [i for i in range(len(meta.seq_lens)) if i not in long]
    fresh = cache.fresh if cache.fresh is not None else cache.staging[:, :1]  # no block sealed: never read
    (k_codes, k_scales), (v_codes, v_scales) = (codec.fields(cache.store[part]) for part in ("k", "v"))
    common = dict(staging=cache.staging, fresh=fresh, k_codes=k_codes, k_scales=k_scales, v_codes=v_codes,
                  v_scales=v_scales, s_stage=cache.staging.stride(0), s_fresh=fresh.stride(0), scale=scale,
                  softcap=softcap, window=window, H=H, GROUP=H // kvh, KVH=kvh)
    reads = [k for k, v in common.items() if isinstance(v, torch.Tensor)]
    out = torch.empty(T, H, D, dtype=torch.float32, device=q.device)
    if short:
        ids, row_seq, row_pos, tables, _ = row_tensors(meta, short, q.device)
        few = out if not long else torch.empty(ids.numel(), H, D, dtype=torch.float32, device=q.device)
        args = dict(q=q if not long else q[ids], out=few, row_seq=row_seq, row_pos=row_pos,
                    row_own=_own_refs(meta, short, bs, q.device), tables=tables, table_stride=tables.stride(0), **common)
        launch(quantized_attention_kernel, (ids.numel(), H), args, {"out": Tiles((1, 1, D), (0, 1, None))},
               ["q", "row_seq", "row_pos", "row_own", "tables", *reads], D=D, BS=bs, CODEC=codec.code)
        if long:
            out[ids] = few
    for i in long:
        table, refs = _chunk_tensors(meta, i, bs, q.device)
        a, b = qsl[i], qsl[i + 1]
        args = dict(q=q[a:b], out=out[a:b], table=table, refs=refs, first=meta.kv_plan.seqs[i].start // bs, n_q=b - a,
                    ctx=meta.seq_lens[i], **common)
        launch(quantized_flash_kernel, (triton.cdiv(b - a, BM), H), args, {"out": Tiles((BM, 1, D), (0, 1, None))},
               ["q", "table", "refs", *reads], D=D, BS=bs, BM=BM, CODEC=codec.code)
    return out


@dataclass(frozen=True, slots=True)
class DevicePlan:
    """A StepPlan's index tensors on the device (hearth.kvstore.paged.StepPlan: what each means)."""

    stage_rows: torch.Tensor
    stage_dst: torch.Tensor
    seal_blocks: torch.Tensor
    new_rows: torch.Tensor
    new_dst: torch.Tensor
    prefix_src: torch.Tensor
    prefix_dst: torch.Tensor


def _device_plan(meta: AttentionMetadata, device) -> DevicePlan:
    key = ("kv_plan", str(device))
    if key not in meta.memo.kernel_args:
        p = meta.kv_plan
        meta.memo.kernel_args[key] = DevicePlan(*(getattr(p, f).to(device) for f in DevicePlan.__slots__))
    return meta.memo.kernel_args[key]


def write_quantized(cache, kv: torch.Tensor, meta: AttentionMetadata) -> None:
    """kv: f32 [T, 2, kv_heads, head_dim], the step's new K and V -> cache (QuantizedKVCache.write's
    effect: f16 staging for blocks being filled; the blocks this step fills kept in cache.fresh and encoded)."""
    plan, dev = meta.kv_plan, cache.staging.device
    idx = _device_plan(meta, dev)
    cache.ensure_slots(plan.num_slots)
    cache.fresh = None
    m = plan.seal_blocks.numel()
    if m:  # assemble the full blocks before staging writes reuse their slots
        fresh = torch.empty(2, m, cache.bs, cache.kv_heads, cache.head_dim, dtype=STAGING_DTYPE, device=dev)
        if plan.prefix_src.numel():
            fresh.view(2, -1, cache.kv_heads, cache.head_dim)[:, idx.prefix_dst] = cache._flat_staging()[:, idx.prefix_src]
        write_rows(fresh, kv[idx.new_rows], idx.new_dst)
        cache.fresh = fresh
        encode_blocks(cache.codec.k.name, fresh, idx.seal_blocks, cache.store)
    if plan.stage_rows.numel():
        write_rows(cache.staging, kv[idx.stage_rows], idx.stage_dst)
