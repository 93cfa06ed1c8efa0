"""The step's attention metadata: where each scheduled token lives, built once per step by the
backend (hearth.backends.base.Backend.metadata) and read by every layer, with the values every layer
shares (gather indices, masks, rope tables, kernel arguments) built on first use into typed fields."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from hearth.kvstore.recurrent import StepStates

NATIVE_MAX_Q = 64
"""Sequences with at least this many new tokens attend through SDPA (faster for long chunks)."""


@dataclass(slots=True)
class StepMemo:
    """What the layers of one step share, each built the first time a layer asks."""

    slots: dict[int, torch.Tensor] = field(default_factory=dict)
    """sequence -> its context's flat cache slots (AttentionMetadata.context_slots)."""
    blocks: dict[tuple[int, int], tuple] = field(default_factory=dict)
    """(sequence, first position) -> how to read its context (context_blocks)."""
    masks: dict[tuple[int, int], torch.Tensor] = field(default_factory=dict)
    """(sequence, window) -> bool mask (causal_mask)."""
    additive: dict[tuple[int, int], torch.Tensor | None] = field(default_factory=dict)
    """(sequence, window) -> f32 0 / -inf mask, or None for plain causal (additive_mask)."""
    tables: dict[int, torch.Tensor] = field(default_factory=dict)
    """sequence -> its block ids (table_tensor)."""
    decode: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    """window -> an all-decode batch's padded slots and mask (decode_gather)."""
    tree_rows: torch.Tensor | None = None
    native: tuple | None = None
    """native_split()."""
    quantized_native: tuple | None = None
    """hearth.kernels.attention.quantized_native_args()."""
    fresh_masks: dict[tuple, tuple] = field(default_factory=dict)
    """(sequence, window, first query, dtype) -> masks of a quantized cache's query span."""
    rope: dict[tuple, tuple] = field(default_factory=dict)
    """hearth.layers.rotary.Rotary's key -> its cos/sin tables for the step's positions."""
    kernel_args: dict[tuple, tuple] = field(default_factory=dict)
    """The fused C++ layer's packed per-step arguments, by cache kind (hearth.kernels.fused_layer)."""
    temperature: dict[tuple, torch.Tensor] = field(default_factory=dict)
    """hearth.layers.attn_temperature's (beta, floor scale) -> the queries' factors for the step's positions."""
    conv_taps: dict[int, torch.Tensor] = field(default_factory=dict)
    """width -> [T, width] the slots a short convolution reads (AttentionMetadata.conv_taps)."""


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
    memo: StepMemo = field(default_factory=lambda: StepMemo(), repr=False)
    """Per-step values shared by every layer (gather indices, masks, rope cos/sin, kernel arguments)."""
    kv_plan: object | None = None
    """hearth.kvstore.paged.StepPlan when the cache is quantized: where new K/V go, how to read each sequence."""
    trees: dict[int, tuple[int, list[int]]] = field(default_factory=dict)
    """Sequences whose last rows are a token tree (speculative decoding): i -> (rows before the
    first node, each node's parent, -1 for the row before the first node). Node c's K/V sit at
    position base + c (base: the first node's), but it attends as a decode of its path would: to
    the keys before base, then to its ancestors and itself as positions base .. base + depth - 1.
    Only for f16/bf16 caches (a quantized cache takes a tree's top-1 chain: Scheduler.set_drafts)."""
    bidirectional: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    """Sequences whose new tokens hold spans of rows that attend to each other both ways (gemma3's image,
    HF's token_type_ids mask; llama.cpp decodes an image batch non-causally): i -> [(first position,
    one past the last)], each span's rows all among this step's queries. A query in a span sees the
    keys its causal (and window) rule allows, or in its span (an OR, as HF's or_mask_function). Only
    the torch attentions honor it (f16/bf16 and quantized caches): the native kernels and fused layers
    step aside for such a step."""
    recurrent: StepStates | None = None
    """The recurrent layers' states and each sequence's slot (a model with such layers: qwen35's DeltaNet)."""

    @property
    def is_decode(self) -> bool:
        return len(self.query_start_loc) - 1 == self.query_start_loc[-1]

    def context_slots(self, i: int) -> torch.Tensor:
        """[ctx] int64: flat cache slots of sequence i's whole context, in position order."""
        memo = self.memo.slots
        if i not in memo:
            pos = torch.arange(self.seq_lens[i])
            table = torch.tensor(self.block_tables[i], dtype=torch.long)
            memo[i] = table[pos // self.block_size] * self.block_size + pos % self.block_size
        return memo[i]

    def conv_taps(self, width: int) -> torch.Tensor:
        """[T, width] int64: for each row, the flat cache slots of the tokens width - 1 .. 0 back along its
        sequence, oldest first (-1: before position 0). The step's rows are read at their own slots (a tree
        node's predecessors are its path's, as a decode of that path would read); earlier tokens by position."""
        if width not in self.memo.conv_taps:
            slots, qsl, bs = self.slot_mapping.tolist(), self.query_start_loc, self.block_size
            taps = []
            for i, table in enumerate(self.block_tables):
                a, n = qsl[i], qsl[i + 1] - qsl[i]
                before, parents = self.trees.get(i, (n, []))
                start = self.seq_lens[i] - before - len(parents)  # the first new row's position
                prev = list(range(-1, before - 1)) + [before + p if p >= 0 else before - 1 for p in parents]
                for j in range(n):
                    row, r, back = [], j, 0  # r: the step's row reached; back: tokens before `start` reached
                    for _ in range(width):
                        if r >= 0:
                            row.append(slots[a + r])
                            r = prev[r]
                        else:
                            back += 1
                            p = start - back
                            row.append(table[p // bs] * bs + p % bs if p >= 0 else -1)
                    taps.append(row[::-1])
            self.memo.conv_taps[width] = torch.tensor(taps, dtype=torch.long).view(-1, width)
        return self.memo.conv_taps[width]

    def context_blocks(self, i: int, start: int) -> tuple[int, int] | tuple[torch.Tensor, int]:
        """How to read positions [start, seq_lens[i]) of sequence i: (first slot, -1) when their
        blocks are consecutive ids (a slice), else (block ids [nb] int64, offset into the gather)."""
        memo, key = self.memo.blocks, (i, start)
        if key not in memo:
            bs, ctx = self.block_size, self.seq_lens[i]
            blocks = self.block_tables[i][start // bs:(ctx - 1) // bs + 1]
            if blocks[-1] - blocks[0] == len(blocks) - 1 and blocks == list(range(blocks[0], blocks[-1] + 1)):
                memo[key] = (blocks[0] * bs + start % bs, -1)
            else:
                memo[key] = (torch.tensor(blocks, dtype=torch.long), start % bs)
        return memo[key]

    def causal_mask(self, i: int, window: int) -> torch.Tensor:
        """[n_q, ctx] bool: query j sits at position ctx - n_q + j and sees keys at or before it (and,
        with a window, only keys less than `window` positions back: llama.cpp's and HF's rule).
        A tree's node rows see the keys before the tree and their ancestors' (the ancestor-only
        mask), the window counted in positions along their path."""
        memo, key = self.memo.masks, (i, window)
        if key not in memo:
            n_q, ctx = self.query_start_loc[i + 1] - self.query_start_loc[i], self.seq_lens[i]
            if i in self.trees:
                memo[key] = self._tree_mask(i, n_q, ctx, window)
                return memo[key]
            qpos = torch.arange(ctx - n_q, ctx).unsqueeze(1)
            kpos = torch.arange(ctx).unsqueeze(0)
            mask = kpos <= qpos
            if window:
                mask &= (qpos - kpos) < window
            for a, b in self.bidirectional.get(i, ()):  # the span's rows see each other
                mask[a - (ctx - n_q):b - (ctx - n_q), a:b] = True
            memo[key] = mask
        return memo[key]

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
        if not self.trees:
            return None
        if self.memo.tree_rows is None:
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
            self.memo.tree_rows = rows
        return self.memo.tree_rows

    def additive_mask(self, i: int, window: int) -> torch.Tensor | None:
        """causal_mask as f32 0 / -inf (what SDPA would convert a bool mask to on every call), or
        None when plain causal attention is the same thing (queries = whole context, no window cut)."""
        memo, key = self.memo.additive, (i, window)
        if key not in memo:
            n_q, ctx = self.query_start_loc[i + 1] - self.query_start_loc[i], self.seq_lens[i]
            if n_q == ctx and (not window or window >= ctx) and i not in self.trees and i not in self.bidirectional:
                memo[key] = None
            else:
                memo[key] = additive_of(self.causal_mask(i, window))
        return memo[key]

    def last_slot(self) -> int:
        """The cache slot of a lone sequence's single new token (decode of one sequence)."""
        p, bs = self.seq_lens[0] - 1, self.block_size
        return self.block_tables[0][p // bs] * bs + p % bs

    def native_split(self) -> tuple[list[int], tuple[torch.Tensor, ...] | None]:
        """(sequences with NATIVE_MAX_Q or more new tokens, for SDPA; the native kernel's arguments
        for all the others: q_start, q_len, seq_lens int64 [s], block tables int64 [s, max_blocks],
        or None when there are none)."""
        if self.memo.native is None:
            qsl = self.query_start_loc
            small = [i for i in range(len(self.seq_lens)) if qsl[i + 1] - qsl[i] < NATIVE_MAX_Q]
            big = [i for i in range(len(self.seq_lens)) if qsl[i + 1] - qsl[i] >= NATIVE_MAX_Q]
            args = None
            if small:
                s, width = len(small), max(len(self.block_tables[i]) for i in small)
                # one tensor from one list, its parts views (the kernels read pointers and strides): a tensor
                # per row cost ~6 us a sequence, one per part ~4 us each
                flat = [qsl[i] for i in small] + [qsl[i + 1] - qsl[i] for i in small] + [self.seq_lens[i] for i in small]
                for i in small:
                    flat += self.block_tables[i]
                    flat += [0] * (width - len(self.block_tables[i]))
                t = torch.tensor(flat, dtype=torch.long)
                args = (t[:s], t[s:2 * s], t[2 * s:3 * s], t[3 * s:].view(s, width))
            self.memo.native = (big, args)
        return self.memo.native

    def table_tensor(self, i: int) -> torch.Tensor:
        """Sequence i's block ids, int64 [blocks] (built once per step)."""
        memo = self.memo.tables
        if i not in memo:
            memo[i] = torch.tensor(self.block_tables[i], dtype=torch.long)
        return memo[i]

    def decode_gather(self, window: int) -> tuple[torch.Tensor, torch.Tensor]:
        """For an all-decode batch: slots [S, L] (padded with slot 0) and mask [S, 1, 1, L]."""
        memo = self.memo.decode
        if window not in memo:
            S, L = len(self.seq_lens), max(self.seq_lens)
            slots = torch.zeros(S, L, dtype=torch.long)
            for i, n in enumerate(self.seq_lens):
                slots[i, :n] = self.context_slots(i)
            kpos = torch.arange(L).unsqueeze(0)
            qpos = torch.tensor(self.seq_lens).unsqueeze(1) - 1
            mask = kpos <= qpos
            if window:
                mask &= (qpos - kpos) < window
            memo[window] = (slots, mask[:, None, None, :])
        return memo[window]


def additive_of(mask: torch.Tensor) -> torch.Tensor:
    """bool mask -> f32 0 where True, -inf where False."""
    return torch.zeros(mask.shape).masked_fill_(~mask, float("-inf"))
