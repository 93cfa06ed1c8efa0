"""Attention over a paged KV cache.

The runner builds one AttentionMetadata per step; every attention layer of the model reads it, so
index and mask tensors are built once per step (cached on the metadata), not once per layer.
Two paths: a batch of single-token decodes is one padded SDPA call; anything else (prefill
chunks, mixed batches) loops over sequences. Both gather each sequence's pages, then run
scaled-dot-product attention."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F


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
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def is_decode(self) -> bool:
        return len(self.query_start_loc) - 1 == self.query_start_loc[-1]

    def context_slots(self, i: int) -> torch.Tensor:
        """[ctx] int64: flat cache slots of sequence i's whole context, in position order."""
        key = ("slots", i)
        if key not in self._cache:
            pos = torch.arange(self.seq_lens[i])
            table = torch.tensor(self.block_tables[i], dtype=torch.long)
            self._cache[key] = table[pos // self.block_size] * self.block_size + pos % self.block_size
        return self._cache[key]

    def causal_mask(self, i: int, window: int) -> torch.Tensor:
        """[n_q, ctx] bool: query j sits at position ctx - n_q + j and sees keys at or before it (and,
        with a window, only keys less than `window` positions back: llama.cpp's and HF's rule)."""
        key = ("mask", i, window)
        if key not in self._cache:
            n_q, ctx = self.query_start_loc[i + 1] - self.query_start_loc[i], self.seq_lens[i]
            qpos = torch.arange(ctx - n_q, ctx).unsqueeze(1)
            kpos = torch.arange(ctx).unsqueeze(0)
            mask = kpos <= qpos
            if window:
                mask &= (qpos - kpos) < window
            self._cache[key] = mask
        return self._cache[key]

    def decode_gather(self, window: int) -> tuple[torch.Tensor, torch.Tensor]:
        """For an all-decode batch: slots [S, L] (padded with slot 0) and mask [S, 1, 1, L]."""
        key = ("decode", window)
        if key not in self._cache:
            S, L = len(self.seq_lens), max(self.seq_lens)
            slots = torch.zeros(S, L, dtype=torch.long)
            for i, n in enumerate(self.seq_lens):
                slots[i, :n] = self.context_slots(i)
            kpos = torch.arange(L).unsqueeze(0)
            qpos = torch.tensor(self.seq_lens).unsqueeze(1) - 1
            mask = kpos <= qpos
            if window:
                mask &= (qpos - kpos) < window
            self._cache[key] = (slots, mask[:, None, None, :])
        return self._cache[key]


def write_kv(kv_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor) -> None:
    """kv_cache: [2, num_blocks, block_size, kv_heads, head_dim]; k, v: [T, kv_heads, head_dim]."""
    flat = kv_cache.view(2, -1, kv_cache.shape[-2], kv_cache.shape[-1])
    flat[0].index_copy_(0, slots, k.to(flat.dtype))
    flat[1].index_copy_(0, slots, v.to(flat.dtype))


def paged_attention(
    q: torch.Tensor,  # [T, heads, head_dim]
    kv_cache: torch.Tensor,  # [2, num_blocks, block_size, kv_heads, head_dim]
    meta: AttentionMetadata,
    scale: float,
    sliding_window: int = 0,
    softcap: float = 0.0,
) -> torch.Tensor:  # [T, heads, head_dim]
    flat = kv_cache.view(2, -1, kv_cache.shape[-2], kv_cache.shape[-1])  # [2, slots, kv_heads, head_dim]
    if meta.is_decode:
        slots, mask = meta.decode_gather(sliding_window)
        k = flat[0][slots].transpose(1, 2).to(q.dtype)  # [S, kv_heads, L, head_dim]
        v = flat[1][slots].transpose(1, 2).to(q.dtype)
        o = _sdpa(q.unsqueeze(2), k, v, mask, scale, softcap)  # [S, heads, 1, head_dim]
        return o.squeeze(2)
    out = torch.empty_like(q)
    for i in range(len(meta.seq_lens)):
        q0, q1 = meta.query_start_loc[i], meta.query_start_loc[i + 1]
        slots = meta.context_slots(i)
        k = flat[0][slots].transpose(0, 1).to(q.dtype)  # [kv_heads, ctx, head_dim]
        v = flat[1][slots].transpose(0, 1).to(q.dtype)
        o = _sdpa(q[q0:q1].transpose(0, 1), k, v, meta.causal_mask(i, sliding_window), scale, softcap)
        out[q0:q1] = o.transpose(0, 1)
    return out


def _sdpa(q, k, v, mask, scale, softcap):
    """q: [..., heads, n_q, d]; k, v: [..., kv_heads, ctx, d]; grouped-query heads share k/v."""
    if not softcap:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
    group = q.shape[-3] // k.shape[-3]
    k, v = k.repeat_interleave(group, -3), v.repeat_interleave(group, -3)
    s = torch.tanh((q @ k.transpose(-1, -2)) * scale / softcap) * softcap
    return torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ v
