"""Attention over a paged KV cache.

The runner builds one AttentionMetadata per step; every attention layer of the model reads it, so
index and mask tensors are built once per step (cached on the metadata), not once per layer.
With the native kernels (hearth.kernels.native), every sequence with fewer than NATIVE_MAX_Q new
tokens (decodes, short chunks) is attended in one C++ call that reads the f16/bf16 pages in place;
longer prefill chunks, one sequence at a time, to the C++ flash kernel on AMX bf16 tiles
(csrc/attention_prefill.h), or SDPA's in bf16 on CPUs without them. The torch paths:
- one sequence decoding one token: its context is a plain slice of the cache when its blocks are
  consecutive ids, else one block gather; then q.K^T, softmax, .V as three ops;
- a batch of single-token decodes: one padded SDPA call;
- anything else (prefill chunks, mixed batches): a loop over sequences, causal SDPA without a
  mask tensor when a sequence's queries are its whole context.
K and V are read together ([2, ...] views) so each layer does one gather and one cast.

A quantized KV cache (hearth.kvstore.paged.QuantizedKVCache, any --kv-cache-dtype but f16/bf16) is
not a tensor: the native kernel (csrc/kv_quant.h) decodes its blocks in place, 16 tokens at a time,
for the same sequences as above; the torch path reads each sequence's K/V through it (its sealed
blocks decoded, per step, only the ones the sequence reads) and attends with the same math. Both
work in the codec's rotated space if it has one (KVarN: queries rotated, outputs rotated back)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hearth.kernels import native
from hearth.kernels.step_metadata import NATIVE_MAX_Q, AttentionMetadata, additive_of  # noqa: F401 (re-exported)

PRECISE_SCORES = "a k bias"
"""Why a layer's long chunks attend with f32 scores instead of the bf16 tiles or bf16 SDPA: a k
projection bias (qwen2) adds a large component every key shares, and bf16's 8-bit mantissa then puts
q.k off by whole logits (Qwen2.5-Coder-0.5B: KL 0.35 from the f32 reference at a golden position where
f32 scores give 0.002). The AVX512-BF16 flash kernel takes them with q and k split into bf16 high and low
parts (~16 mantissa bits); bf16 hi/lo splits in the tile kernel would keep such layers on AMX too."""


def _flat(kv_cache: torch.Tensor) -> torch.Tensor:
    return kv_cache.view(2, -1, kv_cache.shape[-2], kv_cache.shape[-1])  # [2, slots, kv_heads, head_dim]


def write_kv(kv_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor) -> None:
    """kv_cache: [2, num_blocks, block_size, kv_heads, head_dim]; k, v: [T, kv_heads, head_dim]."""
    flat = _flat(kv_cache)
    flat[0].index_copy_(0, slots, k.to(flat.dtype))
    flat[1].index_copy_(0, slots, v.to(flat.dtype))


def write_kv_pair(kv_cache: torch.Tensor, kv: torch.Tensor, meta: AttentionMetadata) -> None:
    """write_kv_pair_torch, through the C++ kernels where they read the cache."""
    if not isinstance(kv_cache, torch.Tensor):
        kv_cache.write(kv, meta.kv_plan, native if native.has("kv_quant") else None)
    elif native_pages(kv, kv_cache):
        native.kv_write(kv.reshape(kv.shape[0], -1), meta.slot_mapping, kv_cache)
    else:
        write_kv_pair_torch(kv_cache, kv, meta)


def write_kv_pair_torch(kv_cache, kv: torch.Tensor, meta: AttentionMetadata) -> None:
    """kv: [T, 2, kv_heads, head_dim] (k and v side by side, as the fused qkv projection leaves
    them) -> the new tokens' slots, in one op (a cast-and-copy for a lone decode token)."""
    if not isinstance(kv_cache, torch.Tensor):
        kv_cache.write(kv, meta.kv_plan, None)
        return
    flat = _flat(kv_cache)
    if kv.shape[0] == 1 and len(meta.seq_lens) == 1:
        flat[:, meta.last_slot()].copy_(kv[0])
    else:
        flat.index_copy_(1, meta.slot_mapping, kv.transpose(0, 1).to(flat.dtype))


def context_kv(kv_cache: torch.Tensor, meta: AttentionMetadata, i: int, start: int = 0) -> torch.Tensor:
    """[2, n, kv_heads, head_dim]: K and V of sequence i at positions [start, seq_lens[i]) -- a view
    of the cache when its blocks are consecutive, else one gather of whole blocks."""
    where, off = meta.context_blocks(i, start)
    n = meta.seq_lens[i] - start
    if off < 0:
        return _flat(kv_cache)[:, where:where + n]
    g = kv_cache.index_select(1, where)  # [2, nb, block_size, kv_heads, head_dim]
    return g.view(2, -1, g.shape[-2], g.shape[-1])[:, off:off + n]


def paged_attention(
    q: torch.Tensor,  # [T, heads, head_dim]
    kv_cache: torch.Tensor,  # [2, num_blocks, block_size, kv_heads, head_dim]
    meta: AttentionMetadata,
    scale: float,
    sliding_window: int = 0,
    softcap: float = 0.0,
    precise: bool = False,
    sinks: torch.Tensor | None = None,  # [heads] f32
) -> torch.Tensor:  # [T, heads, head_dim]
    """precise: long chunks' scores in f32, never bf16 (see PRECISE_SCORES). sinks: one logit per head
    that joins each softmax's denominator (gpt-oss); the C++ kernels have none, so the torch paths."""
    if not isinstance(kv_cache, torch.Tensor):
        return _paged_quantized(q, kv_cache, meta, scale, sliding_window, softcap, sinks is None, precise, sinks)
    # the native kernels' masks are causal (and tree) only: a step with bidirectional rows takes torch's
    if native_pages(q, kv_cache) and sinks is None and not meta.bidirectional:
        out = _paged_native(q, kv_cache, meta, scale, sliding_window, softcap, precise)
        if out is not None:
            return out
    return paged_attention_torch(q, kv_cache, meta, scale, sliding_window, softcap, sinks)


def _long_chunk_dtype(precise: bool) -> torch.dtype:
    """SDPA's dtype for a long chunk the tile kernel does not take: bf16 only where the CPU has AMX bf16
    tiles (torch's SDPA then runs on them too). Elsewhere f32: no slower (Zen 4, 512 rows: 20.5 vs 19.8
    ms f32 / bf16 at 12 heads x 128, one thread) and exact, where bf16 SDPA there put gemma3-270m a
    whole logit off llama.cpp's pick at a golden position (KL 0.18 from the f32 reference; 0.009 in f32)."""
    return torch.bfloat16 if native.bf16_tiles() and not precise else torch.float32


def native_pages(x: torch.Tensor, kv_cache) -> bool:
    """The C++ kernels can read this f16/bf16 cache with f32 rows x."""
    return (isinstance(kv_cache, torch.Tensor) and kv_cache.dtype in native.KV_DTYPES and x.dtype == torch.float32
            and native.has("paged_attention"))


def _paged_native(q, kv_cache, meta, scale, window, softcap, precise=False):
    """None when the kernel does not cover this head shape."""
    big, args = meta.native_split()
    out = torch.empty(q.shape)
    if args is not None and not native.paged_attention(q, kv_cache, *args, scale, window, softcap, out, meta.tree_rows()):
        return None
    dtype = _long_chunk_dtype(precise)
    for i in big:  # long chunks: the C++ flash kernel (AMX tiles or AVX512-BF16), else SDPA
        q0, q1 = meta.query_start_loc[i], meta.query_start_loc[i + 1]
        if i in meta.trees or not native.prefill_attention(q[q0:q1], kv_cache, meta.table_tensor(i), meta.seq_lens[i],
                                                            scale, window, softcap, out[q0:q1], precise):
            out[q0:q1] = _prefill_one(q[q0:q1].to(dtype), kv_cache, meta, i, scale, window, softcap)
    return out


def paged_attention_torch(q, kv_cache, meta, scale, sliding_window=0, softcap=0.0, sinks=None):
    """The torch reference for an f16/bf16 cache (and the path without native kernels)."""
    if meta.is_decode:
        if len(meta.seq_lens) == 1:
            return _decode_one(q, kv_cache, meta, scale, sliding_window, softcap, sinks)
        return _decode_batch(q, kv_cache, meta, scale, sliding_window, softcap, sinks)
    if len(meta.seq_lens) == 1:
        return _prefill_one(q, kv_cache, meta, 0, scale, sliding_window, softcap, sinks)
    out = torch.empty_like(q)
    for i in range(len(meta.seq_lens)):
        q0, q1 = meta.query_start_loc[i], meta.query_start_loc[i + 1]
        out[q0:q1] = _prefill_one(q[q0:q1], kv_cache, meta, i, scale, sliding_window, softcap, sinks)
    return out


_NOTHING = torch.zeros(1, 1, 1)  # baddbmm's ignored input (beta=0): the scale rides on alpha


def _decode_one(q, kv_cache, meta, scale, window, softcap, sinks=None):
    """q: [1, heads, d]. Only the keys in the window are read, so no mask is needed."""
    ctx = meta.seq_lens[0]
    kv = context_kv(kv_cache, meta, 0, max(0, ctx - window) if window else 0).to(q.dtype)  # [2, n, kvh, d]
    return _attend_one_token(q, kv, scale, softcap, sinks)


def _attend_one_token(q, kv, scale, softcap, sinks=None):
    """q: [1, heads, d], kv: [2, n, kv_heads, d], every key visible -> [1, heads, d]."""
    kv_heads, d = kv.shape[-2], kv.shape[-1]
    qg = q.view(kv_heads, -1, d)  # [kvh, group, d]: grouped-query heads share their kv head
    nothing = _NOTHING if q.is_cpu else _NOTHING.to(q.device)  # sinks on the CUDA backend come here
    s = torch.baddbmm(nothing, qg, kv[0].permute(1, 2, 0), beta=0, alpha=scale)  # [kvh, group, n]
    if softcap:
        s = torch.tanh(s / softcap) * softcap
    p = _softmax(s, None if sinks is None else sinks.view(kv_heads, -1, 1).to(s.dtype))
    o = torch.bmm(p, kv[1].transpose(0, 1))  # [kvh, group, d]
    return o.view(q.shape)


def _softmax(s: torch.Tensor, sink: torch.Tensor | None) -> torch.Tensor:
    """Softmax over the last dim of scores s [..., n]; sink (broadcast to [..., 1]): one more logit per head in
    every denominator, weighting no value (gpt-oss's attention sinks, as transformers' and llama.cpp's)."""
    if sink is None:
        return torch.softmax(s, -1)
    return torch.softmax(torch.cat([s, sink.expand(*s.shape[:-1], 1)], -1), -1)[..., :-1]


def _decode_batch(q, kv_cache, meta, scale, window, softcap, sinks=None):
    slots, mask = meta.decode_gather(window)  # [S, L], [S, 1, 1, L]
    S, L = slots.shape
    kv = _flat(kv_cache).index_select(1, slots.view(-1)).to(q.dtype)  # [2, S*L, kvh, d]
    kv = kv.view(2, S, L, kv.shape[-2], kv.shape[-1]).transpose(2, 3)  # [2, S, kvh, L, d]
    o = _sdpa(q.unsqueeze(2), kv[0], kv[1], mask, scale, softcap, sinks)  # [S, heads, 1, d]
    return o.squeeze(2)


def _prefill_one(q, kv_cache, meta, i, scale, window, softcap, sinks=None):
    """q: [n_q, heads, d], the new tokens of sequence i -> [n_q, heads, d]."""
    return _attend_prefill(q, context_kv(kv_cache, meta, i).to(q.dtype), meta, i, scale, window, softcap, sinks)


def _attend_prefill(q, kv, meta, i, scale, window, softcap, sinks=None):
    """q: [n_q, heads, d], kv: [2, ctx, kv_heads, d], sequence i's whole context -> [n_q, heads, d]."""
    kv = kv.transpose(1, 2)  # [2, kvh, ctx, d]
    if softcap:
        o = _sdpa(q.transpose(0, 1), kv[0], kv[1], meta.causal_mask(i, window).to(q.device), scale, softcap, sinks)
        return o.transpose(0, 1).contiguous()  # [n_q, heads, d] rows, as the flash path's (callers view them flat)
    mask = meta.additive_mask(i, window)
    if mask is not None and (mask.dtype != q.dtype or mask.device != q.device):  # CUDA's torch fallbacks
        mask = mask.to(q.device, q.dtype)
    if sinks is not None:
        return _attend_sinks(q.transpose(0, 1), kv[0], kv[1], mask, scale, sinks).transpose(0, 1).contiguous()
    # 4-D inputs reach the flash kernel (3-D ones fell back to the unfused math path)
    o = F.scaled_dot_product_attention(q.transpose(0, 1).unsqueeze(0), kv[0].unsqueeze(0), kv[1].unsqueeze(0),
                                       attn_mask=mask, is_causal=mask is None, scale=scale, enable_gqa=True)
    return o[0].transpose(0, 1)


def _paged_quantized(q, cache, meta, scale, window, softcap, use_native=True, precise=False, sinks=None):
    """Over a QuantizedKVCache: sequences with fewer than NATIVE_MAX_Q new tokens in one native call
    that reads the encoded blocks in place, the others (and all without native kernels) through the
    torch path, in the codec's rotated space if it has one."""
    assert not meta.trees, "a quantized KV cache verifies chains only (Scheduler.set_drafts)"
    out = torch.empty(q.shape, dtype=q.dtype)
    torch_rows, dtype = range(len(meta.seq_lens)), q.dtype
    # the native kernel's mask is causal: a step with bidirectional rows takes the torch path
    if use_native and q.dtype == torch.float32 and native.has("kv_quant") and not meta.bidirectional:
        big, args = quantized_native_args(meta, cache.bs)
        if args is None or native.quantized_paged_attention(q, cache, *args, scale, window, softcap, out):
            torch_rows = big  # long chunks: SDPA, as _paged_native does
            dtype = _long_chunk_dtype(precise)
    rot = cache.rotation
    if torch_rows and rot is not None:  # K/V are stored rotated: q.k and p.V are invariant under the rotation
        rot = rot.to(q.dtype)
        q = q @ rot
    for i in torch_rows:
        q0, q1 = meta.query_start_loc[i], meta.query_start_loc[i + 1]
        o = _quantized_one(q[q0:q1].to(dtype), cache, meta, i, scale, window, softcap, sinks).to(q.dtype)
        out[q0:q1] = o @ rot if rot is not None else o
    return out


def paged_attention_quantized_torch(q, cache, meta, scale, sliding_window=0, softcap=0.0, sinks=None):
    """The torch reference over a QuantizedKVCache (and the path without native kernels)."""
    return _paged_quantized(q, cache, meta, scale, sliding_window, softcap, use_native=False, sinks=sinks)


def quantized_native_args(meta, bs):
    """native_split() plus, for the native sequences, each one's sink slot (int64 [s]) and the f16
    blocks of its new tokens' own blocks (int64 [s, F], StepPlan.fresh_refs, padded with 0)."""
    if meta.memo.quantized_native is None:
        big, args = meta.native_split()
        if args is not None:
            plan, small = meta.kv_plan, sorted(set(range(len(meta.seq_lens))) - set(big))
            refs = [plan.fresh_refs(i, bs) for i in small]
            width = max(map(len, refs))
            fresh = torch.tensor([r + [0] * (width - len(r)) for r in refs], dtype=torch.long)
            sinks = torch.tensor([plan.seqs[i].sink_slot for i in small], dtype=torch.long)
            args = (*args, sinks, fresh)
        meta.memo.quantized_native = (big, args)
    return meta.memo.quantized_native


QUANTIZED_SPAN = 256
"""Query rows per SDPA call over a quantized cache: each span of a long chunk attends only to the keys
up to its own end, so the chunk costs about half its causal square rather than rows x all its keys."""


def _quantized_one(q, cache, meta, i, scale, window, softcap, sinks=None):
    """q: [n_q, heads, d], sequence i's new tokens in the cache's space -> [n_q, heads, d]. A new token
    at position p sees the blocks before its own as stored (decoded) and its own block at full
    precision, as it would while decoding token by token (the block being filled is staged in f16):
    so prefill, chunked prefill and decode give each token the same keys and values."""
    plan, bs, ctx = meta.kv_plan, cache.bs, meta.seq_lens[i]
    p0 = ctx - q.shape[0]
    own = p0 // bs * bs  # start of the first query's block
    s0 = _first_key(p0, own, window)
    stored = cache.read(plan, i, s0, q.dtype)  # [2, ctx - s0, kvh, d]
    fresh = cache.read_fresh(plan, i, q.dtype)  # [2, ctx - own, kvh, d]
    out = torch.empty_like(q)
    spans = meta.bidirectional.get(i, [])  # within [p0, ctx): their keys are all in this step's reads
    for a in range(p0, ctx, QUANTIZED_SPAN):  # query positions [a, b), keys up to b
        b = min(ctx, a + QUANTIZED_SPAN)
        a_own, a_s0 = a // bs * bs, _first_key(a, a // bs * bs, window)
        mine = [(s, e) for s, e in spans if s < b and e > a]  # their rows see keys past b, or out of the window
        k_end, a_s0 = max([b] + [e for _, e in mine]), min([a_s0] + [s for s, _ in mine])
        end = a_own if a == b - 1 else b  # a lone query reads no stored key of its own block
        kv = torch.cat([stored[:, a_s0 - s0:end - s0], fresh[:, a_own - own:k_end - own]], 1).transpose(1, 2)
        key, memo = (i, window, a, q.dtype), meta.memo.fresh_masks  # the same for every layer of the step
        if key not in memo:
            mask = _fresh_mask(a, b, a_s0, a_own, bs, window, k_end, mine)
            memo[key] = (mask, None if softcap else additive_of(mask).to(q.dtype))
        mask, additive = memo[key]
        qa = q[a - p0:b - p0].transpose(0, 1)  # [heads, n, d]
        if softcap:
            o = _sdpa(qa, kv[0], kv[1], mask, scale, softcap, sinks)  # [heads, n, d]
        elif sinks is not None:
            o = _attend_sinks(qa, kv[0], kv[1], additive, scale, sinks)
        else:  # 4-D inputs and an additive mask reach the fused kernel (a bool mask takes the math path)
            o = F.scaled_dot_product_attention(qa.unsqueeze(0), kv[0].unsqueeze(0), kv[1].unsqueeze(0),
                                               attn_mask=additive, scale=scale, enable_gqa=True)[0]
        out[a - p0:b - p0] = o.transpose(0, 1)
    return out


def _first_key(p: int, own: int, window: int) -> int:
    """The earliest key a query at position p (its block starting at own) or after it can see."""
    return min(max(0, p - window + 1), own) if window else 0


def _fresh_mask(p0: int, ctx: int, s0: int, own: int, bs: int, window: int, k_end: int = 0,
                spans: list[tuple[int, int]] = ()) -> torch.Tensor:
    """[n_q, keys] bool over stored keys at [s0, ctx) then fresh keys at [own, k_end or ctx): query at
    position p sees stored keys before its block, fresh keys in its block up to itself (and keys < window
    back); a query in a bidirectional span also every key of its span (AttentionMetadata.bidirectional),
    those after its block fresh."""
    qpos = torch.arange(p0, ctx).unsqueeze(1)
    block = qpos // bs * bs
    end = own if p0 == ctx - 1 else ctx  # a decode reads no stored key of its own block
    kpos = torch.cat([torch.arange(s0, end), torch.arange(own, k_end or ctx)]).unsqueeze(0)
    fresh = torch.arange(kpos.shape[1]).unsqueeze(0) >= end - s0
    where = torch.where(fresh, kpos >= block, kpos < block)  # each key once: stored before the block, else fresh
    mask = where & (kpos <= qpos)
    if window:
        mask &= (qpos - kpos) < window
    for s, e in spans:  # OR the span's square (HF's or_mask_function)
        mask |= where & (qpos >= s) & (qpos < e) & (kpos >= s) & (kpos < e)
    return mask


def _attend_sinks(q, k, v, additive, scale, sinks):
    """q: [heads, n_q, d]; k, v: [kv_heads, ctx, d]; additive: [n_q, ctx] (None: causal over the whole context)
    -> [heads, n_q, d]. With a sink, softmax's denominator Z grows by e^sink, so the output is SDPA's times
    Z / (Z + e^sink) = sigmoid(lse - sink): torch's CPU flash kernel returns lse = ln Z, so no [heads, n_q, ctx]
    scores are held (a long prompt's chunk: 64 heads x 512 x 32k f32 would be 4 GiB)."""
    if q.device.type != "cpu":  # the flash kernel with lse is CPU-only: explicit scores elsewhere
        mask = additive == 0 if additive is not None else torch.ones(q.shape[1], k.shape[1], dtype=torch.bool,
                                                                       device=q.device).tril(k.shape[1] - q.shape[1])
        return _sdpa(q, k, v, mask, scale, 0.0, sinks)
    kvh, group = k.shape[0], q.shape[0] // k.shape[0]
    shape = (kvh, group, k.shape[1], k.shape[2])  # grouped-query heads share their kv head: stride-0 views
    o, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q.reshape(kvh, group, *q.shape[1:]), k.unsqueeze(1).expand(shape), v.unsqueeze(1).expand(shape), 0.0,
        additive is None, attn_mask=additive, scale=scale)
    keep = torch.sigmoid(lse.reshape(q.shape[:-1]) - sinks.view(-1, 1).float())  # [heads, n_q]
    return o.reshape(q.shape).mul_(keep.unsqueeze(-1).to(o.dtype))


def _sdpa(q, k, v, mask, scale, softcap, sinks=None):
    """q: [..., heads, n_q, d]; k, v: [..., kv_heads, ctx, d]; grouped-query heads share k/v; mask: bool,
    True where a query sees a key; sinks: [heads] (see _softmax)."""
    if not softcap and sinks is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
    # scores, softmax and p.V in f32 whatever q/k/v's dtype (the upcast is exact), as fused SDPA and the
    # AMX flash kernel keep them: bf16 scores (8 bits, ~0.06 at |s| ~ 16) moved bf16 outputs by ~0.08
    dtype, group = q.dtype, q.shape[-3] // k.shape[-3]
    k, v = k.float().repeat_interleave(group, -3), v.float().repeat_interleave(group, -3)
    s = (q.float() @ k.transpose(-1, -2)) * scale
    if softcap:
        s = torch.tanh(s / softcap) * softcap
    p = _softmax(s.masked_fill(~mask, float("-inf")), None if sinks is None else sinks.view(-1, 1, 1).float())
    return (p @ v).to(dtype)
