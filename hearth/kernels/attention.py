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

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from hearth.kernels import native

PRECISE_SCORES = "a k bias"
"""Why a layer's long chunks attend with f32 scores instead of the bf16 tiles or bf16 SDPA: a k
projection bias (qwen2) adds a large component every key shares, and bf16's 8-bit mantissa then puts
q.k off by whole logits (Qwen2.5-Coder-0.5B: KL 0.35 from the f32 reference at a golden position where
f32 scores give 0.002). bf16 hi/lo splits in the tile kernel would keep such layers on AMX."""

NATIVE_MAX_Q = 64
"""Sequences with at least this many new tokens attend through SDPA (faster for long chunks)."""


@dataclass(slots=True)
class AttentionMetadata:
    """Where each scheduled token lives, for one forward pass over a flat batch of T tokens."""

    query_start_loc: list[int]
    """len S+1: the new tokens of sequence i are rows [qsl[i], qsl[i+1]) of the batch."""
    seq_lens: list[int]
    """len S: tokens in sequence i's context after this step (cached + new)."""
    block_tables: list[list[int]]
    """len S: the KV block ids of sequence i, in order."""
    slot_mapping: torch.Tensor
    """[T] int64: flat cache slot (block_id * block_size + offset) where each new token's K/V go."""
    block_size: int
    cache: dict = field(default_factory=dict, repr=False)
    """Per-step values shared by every layer (gather indices, masks, rope cos/sin)."""
    kv_plan: object | None = None
    """hearth.kvstore.paged.StepPlan when the cache is quantized: where new K/V go, how to read each sequence."""
    trees: dict[int, tuple[int, list[int]]] = field(default_factory=dict)
    """Sequences whose last rows are a token tree (speculative decoding): i -> (rows before the
    first node, each node's parent, -1 for the row before the first node). Node c's K/V sit at
    position base + c (base: the first node's), but it attends as a decode of its path would: to
    the keys before base, then to its ancestors and itself as positions base .. base + depth - 1.
    Only for f16/bf16 caches (a quantized cache takes a tree's top-1 chain: Scheduler.set_drafts)."""

    @property
    def is_decode(self) -> bool:
        return len(self.query_start_loc) - 1 == self.query_start_loc[-1]

    def context_slots(self, i: int) -> torch.Tensor:
        """[ctx] int64: flat cache slots of sequence i's whole context, in position order."""
        key = ("slots", i)
        if key not in self.cache:
            pos = torch.arange(self.seq_lens[i])
            table = torch.tensor(self.block_tables[i], dtype=torch.long)
            self.cache[key] = table[pos // self.block_size] * self.block_size + pos % self.block_size
        return self.cache[key]

    def context_blocks(self, i: int, start: int) -> tuple[int, int] | tuple[torch.Tensor, int]:
        """How to read positions [start, seq_lens[i]) of sequence i: (first slot, -1) when their
        blocks are consecutive ids (a slice), else (block ids [nb] int64, offset into the gather)."""
        key = ("blocks", i, start)
        if key not in self.cache:
            bs, ctx = self.block_size, self.seq_lens[i]
            blocks = self.block_tables[i][start // bs:(ctx - 1) // bs + 1]
            if blocks[-1] - blocks[0] == len(blocks) - 1 and blocks == list(range(blocks[0], blocks[-1] + 1)):
                self.cache[key] = (blocks[0] * bs + start % bs, -1)
            else:
                self.cache[key] = (torch.tensor(blocks, dtype=torch.long), start % bs)
        return self.cache[key]

    def causal_mask(self, i: int, window: int) -> torch.Tensor:
        """[n_q, ctx] bool: query j sits at position ctx - n_q + j and sees keys at or before it (and,
        with a window, only keys less than `window` positions back: llama.cpp's and HF's rule).
        A tree's node rows see the keys before the tree and their ancestors' (the ancestor-only
        mask), the window counted in positions along their path."""
        key = ("mask", i, window)
        if key not in self.cache:
            n_q, ctx = self.query_start_loc[i + 1] - self.query_start_loc[i], self.seq_lens[i]
            if i in self.trees:
                self.cache[key] = self._tree_mask(i, n_q, ctx, window)
                return self.cache[key]
            qpos = torch.arange(ctx - n_q, ctx).unsqueeze(1)
            kpos = torch.arange(ctx).unsqueeze(0)
            mask = kpos <= qpos
            if window:
                mask &= (qpos - kpos) < window
            self.cache[key] = mask
        return self.cache[key]

    def tree_paths(self, i: int) -> tuple[int, list[int], list[list[int]]]:
        """Sequence i's tree: (base: the first node's position, each row's position along its path,
        each node's path from the first level down to itself)."""
        n_tok, parents = self.trees[i]
        n_q = self.query_start_loc[i + 1] - self.query_start_loc[i]
        base = self.seq_lens[i] - n_q + n_tok
        paths: list[list[int]] = []
        for c, p in enumerate(parents):
            paths.append((paths[p] if p >= 0 else []) + [c])
        qpos = list(range(base - n_tok, base)) + [base - 1 + len(path) for path in paths]
        return base, qpos, paths

    def _tree_mask(self, i: int, n_q: int, ctx: int, window: int) -> torch.Tensor:
        base, qpos, paths = self.tree_paths(i)
        n_tok = n_q - len(paths)
        mask = torch.zeros(n_q, ctx, dtype=torch.bool)
        kpos = torch.arange(ctx)  # a node key's position along a path: base - 1 + its depth
        for c, path in enumerate(paths):
            kpos[base + c] = base - 1 + len(path)
        for j in range(n_tok):
            mask[j, : base - n_tok + j + 1] = True
        for c, path in enumerate(paths):
            mask[n_tok + c, :base] = True
            mask[n_tok + c, [base + a for a in path]] = True
        if window:
            mask &= (torch.tensor(qpos).unsqueeze(1) - kpos.unsqueeze(0)) < window
        return mask

    def tree_rows(self) -> torch.Tensor | None:
        """For the native kernels: int64 [T, 2 + depth], per row -1 (an ordinary row), or for a node
        row its position along its path, the first node's position (base) and the flat cache slots
        of the keys base .. its position (its ancestors', then its own): the kernel then walks the
        same keys, in the same order and blocks, as a decode of the path (the same bits)."""
        if "tree_rows" not in self.cache:
            rows = None
            if self.trees:
                layout = {i: self.tree_paths(i) for i in self.trees}
                depth = max(len(path) for _, _, paths in layout.values() for path in paths)
                rows = torch.full((self.query_start_loc[-1], 2 + depth), -1, dtype=torch.long)
                bs = self.block_size
                for i, (base, qpos, paths) in layout.items():
                    first = self.query_start_loc[i + 1] - len(paths)
                    table = self.block_tables[i]
                    for c, path in enumerate(paths):
                        slots = [table[(base + a) // bs] * bs + (base + a) % bs for a in path]
                        rows[first + c, : 2 + len(path)] = torch.tensor([qpos[len(qpos) - len(paths) + c], base] + slots)
            self.cache["tree_rows"] = rows
        return self.cache["tree_rows"]

    def additive_mask(self, i: int, window: int) -> torch.Tensor | None:
        """causal_mask as f32 0 / -inf (what SDPA would convert a bool mask to on every call), or
        None when plain causal attention is the same thing (queries = whole context, no window cut)."""
        key = ("additive", i, window)
        if key not in self.cache:
            n_q, ctx = self.query_start_loc[i + 1] - self.query_start_loc[i], self.seq_lens[i]
            if n_q == ctx and (not window or window >= ctx) and i not in self.trees:
                self.cache[key] = None
            else:
                self.cache[key] = _additive(self.causal_mask(i, window))
        return self.cache[key]

    def last_slot(self) -> int:
        """The cache slot of a lone sequence's single new token (decode of one sequence)."""
        p, bs = self.seq_lens[0] - 1, self.block_size
        return self.block_tables[0][p // bs] * bs + p % bs

    def native_split(self) -> tuple[list[int], tuple[torch.Tensor, ...] | None]:
        """(sequences with NATIVE_MAX_Q or more new tokens, for SDPA; the native kernel's arguments
        for all the others: q_start, q_len, seq_lens int64 [s], block tables int64 [s, max_blocks],
        or None when there are none)."""
        if "native" not in self.cache:
            qsl = self.query_start_loc
            small = [i for i in range(len(self.seq_lens)) if qsl[i + 1] - qsl[i] < NATIVE_MAX_Q]
            big = [i for i in range(len(self.seq_lens)) if qsl[i + 1] - qsl[i] >= NATIVE_MAX_Q]
            args = None
            if small:
                width = max(len(self.block_tables[i]) for i in small)
                tables = torch.zeros(len(small), width, dtype=torch.long)
                for r, i in enumerate(small):
                    tables[r, :len(self.block_tables[i])] = torch.tensor(self.block_tables[i], dtype=torch.long)
                args = (torch.tensor([qsl[i] for i in small], dtype=torch.long),
                        torch.tensor([qsl[i + 1] - qsl[i] for i in small], dtype=torch.long),
                        torch.tensor([self.seq_lens[i] for i in small], dtype=torch.long), tables)
            self.cache["native"] = (big, args)
        return self.cache["native"]

    def table_tensor(self, i: int) -> torch.Tensor:
        """Sequence i's block ids, int64 [blocks] (built once per step)."""
        key = ("table", i)
        if key not in self.cache:
            self.cache[key] = torch.tensor(self.block_tables[i], dtype=torch.long)
        return self.cache[key]

    def decode_gather(self, window: int) -> tuple[torch.Tensor, torch.Tensor]:
        """For an all-decode batch: slots [S, L] (padded with slot 0) and mask [S, 1, 1, L]."""
        key = ("decode", window)
        if key not in self.cache:
            S, L = len(self.seq_lens), max(self.seq_lens)
            slots = torch.zeros(S, L, dtype=torch.long)
            for i, n in enumerate(self.seq_lens):
                slots[i, :n] = self.context_slots(i)
            kpos = torch.arange(L).unsqueeze(0)
            qpos = torch.tensor(self.seq_lens).unsqueeze(1) - 1
            mask = kpos <= qpos
            if window:
                mask &= (qpos - kpos) < window
            self.cache[key] = (slots, mask[:, None, None, :])
        return self.cache[key]


def _additive(mask: torch.Tensor) -> torch.Tensor:
    return torch.zeros(mask.shape).masked_fill_(~mask, float("-inf"))


def _flat(kv_cache: torch.Tensor) -> torch.Tensor:
    return kv_cache.view(2, -1, kv_cache.shape[-2], kv_cache.shape[-1])  # [2, slots, kv_heads, head_dim]


def write_kv(kv_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor) -> None:
    """kv_cache: [2, num_blocks, block_size, kv_heads, head_dim]; k, v: [T, kv_heads, head_dim]."""
    flat = _flat(kv_cache)
    flat[0].index_copy_(0, slots, k.to(flat.dtype))
    flat[1].index_copy_(0, slots, v.to(flat.dtype))


def write_kv_pair(kv_cache: torch.Tensor, kv: torch.Tensor, meta: AttentionMetadata) -> None:
    """kv: [T, 2, kv_heads, head_dim] (k and v side by side, as the fused qkv projection leaves
    them) -> the new tokens' slots, in one op (a cast-and-copy for a lone decode token)."""
    if not isinstance(kv_cache, torch.Tensor):
        kv_cache.write(kv, meta.kv_plan, native if native.has("kv_quant") else None)
        return
    if native_pages(kv, kv_cache):
        native.kv_write(kv.reshape(kv.shape[0], -1), meta.slot_mapping, kv_cache)
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
) -> torch.Tensor:  # [T, heads, head_dim]
    """precise: long chunks' scores in f32, never bf16 (see PRECISE_SCORES)."""
    if not isinstance(kv_cache, torch.Tensor):
        return _paged_quantized(q, kv_cache, meta, scale, sliding_window, softcap, precise=precise)
    if native_pages(q, kv_cache):
        out = _paged_native(q, kv_cache, meta, scale, sliding_window, softcap, precise)
        if out is not None:
            return out
    return paged_attention_torch(q, kv_cache, meta, scale, sliding_window, softcap)


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
    for i in big:  # long chunks on AMX bf16 tiles: the C++ flash kernel, else SDPA's in bf16 (f32 if precise)
        q0, q1 = meta.query_start_loc[i], meta.query_start_loc[i + 1]
        if precise or i in meta.trees or not native.prefill_attention(q[q0:q1], kv_cache, meta.table_tensor(i), meta.seq_lens[i], scale,
                                                   window, softcap, out[q0:q1]):
            qi = q[q0:q1] if precise else q[q0:q1].to(torch.bfloat16)
            out[q0:q1] = _prefill_one(qi, kv_cache, meta, i, scale, window, softcap)
    return out


def paged_attention_torch(q, kv_cache, meta, scale, sliding_window=0, softcap=0.0):
    """The torch reference for an f16/bf16 cache (and the path without native kernels)."""
    if meta.is_decode:
        if len(meta.seq_lens) == 1:
            return _decode_one(q, kv_cache, meta, scale, sliding_window, softcap)
        return _decode_batch(q, kv_cache, meta, scale, sliding_window, softcap)
    if len(meta.seq_lens) == 1:
        return _prefill_one(q, kv_cache, meta, 0, scale, sliding_window, softcap)
    out = torch.empty_like(q)
    for i in range(len(meta.seq_lens)):
        q0, q1 = meta.query_start_loc[i], meta.query_start_loc[i + 1]
        out[q0:q1] = _prefill_one(q[q0:q1], kv_cache, meta, i, scale, sliding_window, softcap)
    return out


_NOTHING = torch.zeros(1, 1, 1)  # baddbmm's ignored input (beta=0): the scale rides on alpha


def _decode_one(q, kv_cache, meta, scale, window, softcap):
    """q: [1, heads, d]. Only the keys in the window are read, so no mask is needed."""
    ctx = meta.seq_lens[0]
    kv = context_kv(kv_cache, meta, 0, max(0, ctx - window) if window else 0).to(q.dtype)  # [2, n, kvh, d]
    return _attend_one_token(q, kv, scale, softcap)


def _attend_one_token(q, kv, scale, softcap):
    """q: [1, heads, d], kv: [2, n, kv_heads, d], every key visible -> [1, heads, d]."""
    kv_heads, d = kv.shape[-2], kv.shape[-1]
    qg = q.view(kv_heads, -1, d)  # [kvh, group, d]: grouped-query heads share their kv head
    s = torch.baddbmm(_NOTHING, qg, kv[0].permute(1, 2, 0), beta=0, alpha=scale)  # [kvh, group, n]
    if softcap:
        s = torch.tanh(s / softcap) * softcap
    o = torch.bmm(torch.softmax(s, -1), kv[1].transpose(0, 1))  # [kvh, group, d]
    return o.view(q.shape)


def _decode_batch(q, kv_cache, meta, scale, window, softcap):
    slots, mask = meta.decode_gather(window)  # [S, L], [S, 1, 1, L]
    S, L = slots.shape
    kv = _flat(kv_cache).index_select(1, slots.view(-1)).to(q.dtype)  # [2, S*L, kvh, d]
    kv = kv.view(2, S, L, kv.shape[-2], kv.shape[-1]).transpose(2, 3)  # [2, S, kvh, L, d]
    o = _sdpa(q.unsqueeze(2), kv[0], kv[1], mask, scale, softcap)  # [S, heads, 1, d]
    return o.squeeze(2)


def _prefill_one(q, kv_cache, meta, i, scale, window, softcap):
    """q: [n_q, heads, d], the new tokens of sequence i -> [n_q, heads, d]."""
    return _attend_prefill(q, context_kv(kv_cache, meta, i).to(q.dtype), meta, i, scale, window, softcap)


def _attend_prefill(q, kv, meta, i, scale, window, softcap):
    """q: [n_q, heads, d], kv: [2, ctx, kv_heads, d], sequence i's whole context -> [n_q, heads, d]."""
    kv = kv.transpose(1, 2)  # [2, kvh, ctx, d]
    if softcap:
        o = _sdpa(q.transpose(0, 1), kv[0], kv[1], meta.causal_mask(i, window), scale, softcap)
        return o.transpose(0, 1)
    mask = meta.additive_mask(i, window)
    if mask is not None and mask.dtype != q.dtype:
        mask = mask.to(q.dtype)
    # 4-D inputs reach the flash kernel (3-D ones fell back to the unfused math path)
    o = F.scaled_dot_product_attention(q.transpose(0, 1).unsqueeze(0), kv[0].unsqueeze(0), kv[1].unsqueeze(0),
                                       attn_mask=mask, is_causal=mask is None, scale=scale, enable_gqa=True)
    return o[0].transpose(0, 1)


def _paged_quantized(q, cache, meta, scale, window, softcap, use_native=True, precise=False):
    """Over a QuantizedKVCache: sequences with fewer than NATIVE_MAX_Q new tokens in one native call
    that reads the encoded blocks in place, the others (and all without native kernels) through the
    torch path, in the codec's rotated space if it has one."""
    assert not meta.trees, "a quantized KV cache verifies chains only (Scheduler.set_drafts)"
    out = torch.empty(q.shape, dtype=q.dtype)
    torch_rows, dtype = range(len(meta.seq_lens)), q.dtype
    if use_native and q.dtype == torch.float32 and native.has("kv_quant"):
        big, args = quantized_native_args(meta, cache.bs)
        if args is None or native.quantized_paged_attention(q, cache, *args, scale, window, softcap, out):
            torch_rows = big  # long chunks: bf16 SDPA, as _paged_native does (f32 if precise)
            dtype = q.dtype if precise else torch.bfloat16
    rot = cache.rotation
    if torch_rows and rot is not None:  # K/V are stored rotated: q.k and p.V are invariant under the rotation
        rot = rot.to(q.dtype)
        q = q @ rot
    for i in torch_rows:
        q0, q1 = meta.query_start_loc[i], meta.query_start_loc[i + 1]
        o = _quantized_one(q[q0:q1].to(dtype), cache, meta, i, scale, window, softcap).to(q.dtype)
        out[q0:q1] = o @ rot if rot is not None else o
    return out


def paged_attention_quantized_torch(q, cache, meta, scale, sliding_window=0, softcap=0.0):
    """The torch reference over a QuantizedKVCache (and the path without native kernels)."""
    return _paged_quantized(q, cache, meta, scale, sliding_window, softcap, use_native=False)


def quantized_native_args(meta, bs):
    """native_split() plus, for the native sequences, each one's sink slot (int64 [s]) and the f16
    blocks of its new tokens' own blocks (int64 [s, F], StepPlan.fresh_refs, padded with 0)."""
    if "quantized_native" not in meta.cache:
        big, args = meta.native_split()
        if args is not None:
            plan, small = meta.kv_plan, sorted(set(range(len(meta.seq_lens))) - set(big))
            refs = [plan.fresh_refs(i, bs) for i in small]
            width = max(map(len, refs))
            fresh = torch.tensor([r + [0] * (width - len(r)) for r in refs], dtype=torch.long)
            sinks = torch.tensor([plan.seqs[i].sink_slot for i in small], dtype=torch.long)
            args = (*args, sinks, fresh)
        meta.cache["quantized_native"] = (big, args)
    return meta.cache["quantized_native"]


QUANTIZED_SPAN = 256
"""Query rows per SDPA call over a quantized cache: each span of a long chunk attends only to the keys
up to its own end, so the chunk costs about half its causal square rather than rows x all its keys."""


def _quantized_one(q, cache, meta, i, scale, window, softcap):
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
    for a in range(p0, ctx, QUANTIZED_SPAN):  # query positions [a, b), keys up to b
        b = min(ctx, a + QUANTIZED_SPAN)
        a_own, a_s0 = a // bs * bs, _first_key(a, a // bs * bs, window)
        end = a_own if a == b - 1 else b  # a lone query reads no stored key of its own block
        kv = torch.cat([stored[:, a_s0 - s0:end - s0], fresh[:, a_own - own:b - own]], 1).transpose(1, 2)
        key = ("fresh_mask", i, window, a, q.dtype)  # the same for every layer of the step
        if key not in meta.cache:
            mask = _fresh_mask(a, b, a_s0, a_own, bs, window)
            meta.cache[key] = (mask, None if softcap else _additive(mask).to(q.dtype))
        mask, additive = meta.cache[key]
        qa = q[a - p0:b - p0].transpose(0, 1)  # [heads, n, d]
        if softcap:
            o = _sdpa(qa, kv[0], kv[1], mask, scale, softcap)  # [heads, n, d]
        else:  # 4-D inputs and an additive mask reach the fused kernel (a bool mask takes the math path)
            o = F.scaled_dot_product_attention(qa.unsqueeze(0), kv[0].unsqueeze(0), kv[1].unsqueeze(0),
                                               attn_mask=additive, scale=scale, enable_gqa=True)[0]
        out[a - p0:b - p0] = o.transpose(0, 1)
    return out


def _first_key(p: int, own: int, window: int) -> int:
    """The earliest key a query at position p (its block starting at own) or after it can see."""
    return min(max(0, p - window + 1), own) if window else 0


def _fresh_mask(p0: int, ctx: int, s0: int, own: int, bs: int, window: int) -> torch.Tensor:
    """[n_q, keys] bool over stored keys at [s0, ctx) then fresh keys at [own, ctx): query at position p
    sees stored keys before its block, fresh keys in its block up to itself (and keys < window back)."""
    qpos = torch.arange(p0, ctx).unsqueeze(1)
    block = qpos // bs * bs
    end = own if p0 == ctx - 1 else ctx  # a decode reads no stored key of its own block
    kpos = torch.cat([torch.arange(s0, end), torch.arange(own, ctx)]).unsqueeze(0)
    fresh = torch.arange(kpos.shape[1]).unsqueeze(0) >= end - s0
    mask = torch.where(fresh, (kpos >= block) & (kpos <= qpos), kpos < block)
    if window:
        mask &= (qpos - kpos) < window
    return mask


def _sdpa(q, k, v, mask, scale, softcap):
    """q: [..., heads, n_q, d]; k, v: [..., kv_heads, ctx, d]; grouped-query heads share k/v."""
    if not softcap:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
    # scores, softmax and p.V in f32 whatever q/k/v's dtype (the upcast is exact), as fused SDPA and the
    # AMX flash kernel keep them: bf16 scores (8 bits, ~0.06 at |s| ~ 16) moved bf16 outputs by ~0.08
    dtype, group = q.dtype, q.shape[-3] // k.shape[-3]
    k, v = k.float().repeat_interleave(group, -3), v.float().repeat_interleave(group, -3)
    s = torch.tanh((q.float() @ k.transpose(-1, -2)) * scale / softcap) * softcap
    return (torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ v).to(dtype)
