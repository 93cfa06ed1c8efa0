"""Attention over a paged KV cache.

The runner builds one AttentionMetadata per step; every attention layer of the model reads it.
This file holds the torch reference: gather each sequence's pages, then scaled-dot-product attention.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    out = torch.empty_like(q)
    heads, kv_heads = q.shape[1], kv_cache.shape[3]
    for i, table in enumerate(meta.block_tables):
        q0, q1 = meta.query_start_loc[i], meta.query_start_loc[i + 1]
        n_q, ctx = q1 - q0, meta.seq_lens[i]
        blocks = torch.tensor(table[: (ctx + meta.block_size - 1) // meta.block_size], dtype=torch.long)
        k = kv_cache[0, blocks].flatten(0, 1)[:ctx]  # [ctx, kv_heads, head_dim]
        v = kv_cache[1, blocks].flatten(0, 1)[:ctx]
        qi = q[q0:q1].transpose(0, 1)  # [heads, n_q, head_dim]
        k = k.transpose(0, 1).repeat_interleave(heads // kv_heads, 0).to(q.dtype)
        v = v.transpose(0, 1).repeat_interleave(heads // kv_heads, 0).to(q.dtype)
        mask = _mask(n_q, ctx, sliding_window)
        if softcap:
            s = (qi @ k.transpose(1, 2)) * scale
            s = torch.tanh(s / softcap) * softcap
            s = s.masked_fill(~mask, float("-inf"))
            o = torch.softmax(s, dim=-1) @ v
        else:
            o = F.scaled_dot_product_attention(qi, k, v, attn_mask=mask, scale=scale)
        out[q0:q1] = o.transpose(0, 1)
    return out


def _mask(n_q: int, ctx: int, window: int) -> torch.Tensor:
    """[n_q, ctx] bool: query j sits at position ctx - n_q + j and sees keys at or before it
    (and, with a window, the `window` most recent of them, llama.cpp's rule: pos - key < window)."""
    qpos = torch.arange(ctx - n_q, ctx).unsqueeze(1)
    kpos = torch.arange(ctx).unsqueeze(0)
    mask = kpos <= qpos
    if window:
        mask &= (qpos - kpos) < window
    return mask
