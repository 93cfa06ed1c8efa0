"""The KV write and attention over a quantized paged cache (hearth.kvstore.paged.QuantizedKVCache) in
Triton: the CUDA backend's for fp8_e4m3 and q8_0 (codecs: hearth.kernels.gpu.kv_codecs).

The cache keeps the encoded bytes on the device and never expands them: the write stages the rows of
blocks being filled in f16 (the plain KV write kernel, into the staging slots), assembles the blocks a
step fills, keeps them as `fresh` (f16) for this step's queries and encodes them into their block ids.
Attention, one program per (query row, head), walks the row's blocks with the online softmax of
paged_attention_kernel: blocks before its own decoded in registers from their codes, its own block at
full precision (its staging slot, or the fresh copy of a block sealed this step), as the torch twin
(hearth.kernels.attention.paged_attention_quantized_torch) sees them. Every row attends row-wise,
prefill chunks too (no flash tiles over codes yet). No token trees: a quantized cache verifies chains
only (Scheduler.set_drafts)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from hearth.errors import UnsupportedError
from hearth.kernels.gpu.kv_codecs import GPU_CODECS, decode_tile, encode_blocks
from hearth.kernels.gpu.launch import Tiles, launch
from hearth.kernels.gpu.paged_attention import online_softmax_step, row_tensors, write_rows
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


def _own_refs(meta: AttentionMetadata, bs: int, device) -> torch.Tensor:
    """int32 [T]: for each row, StepPlan.fresh_refs's entry for the block holding it. Once per step."""
    key = ("quantized_own", str(device))
    if key not in meta.memo.kernel_args:
        plan, refs = meta.kv_plan, []
        for i, ctx in enumerate(meta.seq_lens):
            fresh, first = plan.fresh_refs(i, bs), plan.seqs[i].start // bs
            refs += [fresh[p // bs - first] for p in range(plan.seqs[i].start, ctx)]
        meta.memo.kernel_args[key] = torch.tensor(refs, dtype=torch.int32, device=device)
    return meta.memo.kernel_args[key]


def quantized_attention(q: torch.Tensor, cache, meta: AttentionMetadata, scale: float, window: int = 0,
                        softcap: float = 0.0) -> torch.Tensor:
    """q: [T, heads, head_dim] over a QuantizedKVCache on q's device -> f32 [T, heads, head_dim]."""
    if meta.trees:
        raise UnsupportedError("a quantized KV cache verifies chains only (Scheduler.set_drafts)")
    T, H, D = q.shape
    codec, kvh = GPU_CODECS[cache.codec.k.name], cache.kv_heads
    q = q.contiguous()
    ids, row_seq, row_pos, tables, _ = row_tensors(meta, list(range(len(meta.seq_lens))), q.device)
    fresh = cache.fresh if cache.fresh is not None else cache.staging[:, :1]  # no block sealed: never read
    (k_codes, k_scales), (v_codes, v_scales) = (codec.fields(cache.store[part]) for part in ("k", "v"))
    out = torch.empty(T, H, D, dtype=torch.float32, device=q.device)
    args = dict(q=q, out=out, row_seq=row_seq, row_pos=row_pos, row_own=_own_refs(meta, cache.bs, q.device),
                tables=tables, table_stride=tables.stride(0), staging=cache.staging, fresh=fresh, k_codes=k_codes,
                k_scales=k_scales, v_codes=v_codes, v_scales=v_scales, s_stage=cache.staging.stride(0),
                s_fresh=fresh.stride(0), scale=scale, softcap=softcap, window=window, H=H, GROUP=H // kvh, KVH=kvh)
    reads = [k for k, v in args.items() if isinstance(v, torch.Tensor) and k != "out"]
    launch(quantized_attention_kernel, (T, H), args, {"out": Tiles((1, 1, D), (0, 1, None))}, reads,
           D=D, BS=cache.bs, CODEC=codec.code)
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
