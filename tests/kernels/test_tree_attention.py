"""Token-tree attention (speculative decoding): a tree's node rows attend to the keys before the tree
and to their ancestors only. The native kernel (a per-row remap of the keys from the tree's first
position to the row's path slots) against the torch twin (an ancestor-only mask over the physical
layout), and bit for bit against a decode of each node's path: the path's K/V written at the path's
positions, one row at the node's position along its path, in a call with as many sequences."""

from __future__ import annotations

import pytest
import torch

from hearth.kernels import native
from hearth.kernels.attention import AttentionMetadata, paged_attention, paged_attention_torch
from tests.kernels.test_native_attention import scattered_batch

needs_native = pytest.mark.skipif(not native.available(), reason="native kernels do not run here")

PARENTS = [-1, -1, 0, 0, 2, 1, 4, 4]  # depths 1 1 2 2 3 2 4 4: siblings at the root and deeper
CASES = [  # heads, kv_heads, head_dim, first node's position, window, softcap, block size
    (9, 3, 64, 110, 0, 0.0, 16),  # SmolLM2's heads; the nodes and their paths cross a block boundary
    (9, 3, 64, 3, 0, 0.0, 4),  # a short context: every key in a few blocks of 4
    (4, 1, 256, 300, 64, 0.0, 16),  # gemma3-like: a sliding window counted along the path
    (8, 8, 128, 45, 0, 30.0, 16),  # softcap, no grouping
]


def tree_meta(base: int, parents: list[int], bs: int, g: torch.Generator, others: int = 1) -> AttentionMetadata:
    """Sequence 0: its next token at base - 1, then the tree's nodes at base, base + 1, ...; `others`
    decoding sequences after it. Block tables scattered."""
    ctx = [base + len(parents)] + [base // 2 + 7 * j + 1 for j in range(others)]
    meta = scattered_batch([1 + len(parents)] + [1] * others, ctx, bs, 512, g)
    meta.trees = {0: (1, list(parents))}
    return meta


def fresh(meta: AttentionMetadata) -> AttentionMetadata:
    m = AttentionMetadata(meta.query_start_loc, meta.seq_lens, meta.block_tables, meta.slot_mapping, meta.block_size)
    m.trees = dict(meta.trees)
    return m


@needs_native
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"h{c[0]}kv{c[1]}d{c[2]}b{c[3]}w{c[4]}c{c[5]:g}")
def test_tree_rows_native_match_torch_and_a_decode_of_their_path(case, dtype):
    heads, kvh, d, base, window, softcap, bs = case
    g = torch.Generator().manual_seed(base + d)
    meta = tree_meta(base, PARENTS, bs, g)
    cache = torch.randn(2, 512, bs, kvh, d, generator=g).to(dtype)
    q = torch.randn(meta.query_start_loc[-1], heads, d, generator=g)
    scale = d ** -0.5 * 3
    got = paged_attention(q, cache, meta, scale, window, softcap)
    want = paged_attention_torch(q, cache, fresh(meta), scale, window, softcap)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=0)

    # each node as the one decoding row of its path, its ancestors' K/V moved to the path's positions
    _, qpos, paths = meta.tree_paths(0)
    flat, table = cache.view(2, -1, kvh, d), meta.block_tables[0]
    slot = lambda p: table[p // bs] * bs + p % bs  # noqa: E731
    for c, path in enumerate(paths):
        moved = cache.clone()
        mflat = moved.view(2, -1, kvh, d)
        for depth, a in enumerate(path):
            mflat[:, slot(base + depth)] = flat[:, slot(base + a)]
        ctx = base + len(path)
        rows = [1 + c, len(q) - 1]  # the node's row, and the other sequence's decode row (S = 2 again)
        dmeta = AttentionMetadata([0, 1, 2], [ctx, meta.seq_lens[1]], [table, meta.block_tables[1]],
                                  torch.tensor([slot(ctx - 1), 0]), bs)
        one = paged_attention(q[rows].contiguous(), moved, dmeta, scale, window, softcap)
        assert qpos[1 + c] == ctx - 1
        assert torch.equal(one[0], got[1 + c]), f"node {c} (path {path}) differs from a decode of its path"
    # the ordinary rows are untouched by the tree: the next token's row and the other sequence
    plain = AttentionMetadata(meta.query_start_loc, meta.seq_lens, meta.block_tables, meta.slot_mapping, bs)
    plain.seq_lens = [base] + meta.seq_lens[1:]
    plain.query_start_loc = [0, 1, 2]
    one = paged_attention(q[[0, len(q) - 1]].contiguous(), cache, plain, scale, window, softcap)
    assert torch.equal(one[0], got[0]) and torch.equal(one[1], got[-1])


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"h{c[0]}kv{c[1]}d{c[2]}b{c[3]}w{c[4]}c{c[5]:g}")
def test_the_torch_twins_tree_rows_equal_a_decode_of_their_path(case):
    """The mask over the physical layout against the plain torch decode of each node's path (its
    ancestors' K/V moved to the path's positions): the same keys, so equal to f32 rounding."""
    heads, kvh, d, base, window, softcap, bs = case
    g = torch.Generator().manual_seed(base + d + 1)
    meta = tree_meta(base, PARENTS, bs, g, others=0)
    cache = torch.randn(2, 512, bs, kvh, d, generator=g).to(torch.float16)
    q = torch.randn(meta.query_start_loc[-1], heads, d, generator=g)
    scale = d ** -0.5 * 3
    got = paged_attention_torch(q, cache, meta, scale, window, softcap)
    _, _, paths = meta.tree_paths(0)
    flat, table = cache.view(2, -1, kvh, d), meta.block_tables[0]
    slot = lambda p: table[p // bs] * bs + p % bs  # noqa: E731
    for c, path in enumerate(paths):
        moved = cache.clone()
        for depth, a in enumerate(path):
            moved.view(2, -1, kvh, d)[:, slot(base + depth)] = flat[:, slot(base + a)]
        ctx = base + len(path)
        dmeta = AttentionMetadata([0, 1], [ctx], [table], torch.tensor([slot(ctx - 1)]), bs)
        one = paged_attention_torch(q[1 + c:2 + c], moved, dmeta, scale, window, softcap)
        torch.testing.assert_close(one[0], got[1 + c], atol=1e-5, rtol=0)


def test_a_node_sees_only_its_ancestors():
    """Values of 1000 on every key a node must not see (its siblings' and cousins'): they vanish."""
    bs, d, base = 4, 16, 9
    meta = tree_meta(base, PARENTS, bs, torch.Generator().manual_seed(1), others=0)
    cache = torch.zeros(2, 512, bs, 1, d, dtype=torch.float16)
    flat = cache.view(2, -1, 1, d)
    _, _, paths = meta.tree_paths(0)
    slots = meta.context_slots(0)
    c = 6  # path 0 -> 2 -> 4 -> 6
    flat[1, slots] = 1000.0
    flat[1, slots[:base]] = 1.0
    flat[1, slots[[base + a for a in paths[c]]]] = 1.0
    q = torch.randn(meta.query_start_loc[-1], 1, d)
    for fn in (paged_attention_torch,) + ((paged_attention,) if native.available() else ()):
        out = fn(q, cache, fresh(meta), 1.0, 0, 0.0)
        torch.testing.assert_close(out[1 + c], torch.ones(1, d))
