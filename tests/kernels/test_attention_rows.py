"""Row groups of the native paged attention (csrc/attention_tasks.h, attention_rows.h): a sequence's
rows in one step (a verify chain, a token tree) read each K/V block once for all of them, and every
row keeps the bits it gets on its own. Bit for bit against the same call with row groups off (every
task alone), and against decode calls with one row per sequence at that row's position, on f16 and
bf16 caches, every head_dim the kernel takes, windows, soft-cap, block boundaries, long contexts split
into key ranges and groups cut by their size. A row's key ranges follow its own key count alone, so a
decode row has the same bits at any thread count and beside any other sequences. Runs at every native
tier (`make test` forces each)."""

from __future__ import annotations

import pytest
import torch

from hearth.kernels import native
from hearth.kernels.attention import AttentionMetadata, paged_attention
from tests.kernels.test_native_attention import scattered_batch
from tests.kernels.test_tree_attention import PARENTS, fresh, tree_meta

pytestmark = pytest.mark.skipif(not native.has("paged_attention"), reason="the kernels here lack capability "
                                "paged_attention")

CASES = [  # heads, kv_heads, head_dim, q_lens, ctx_lens, window, softcap, block size
    (12, 2, 128, [16], [530], 0, 0.0, 16),  # Qwen2.5-Coder-1.5B verifying a 16-row chain
    (9, 3, 64, [5, 1, 9], [300, 41, 77], 0, 0.0, 16),  # chains beside a decode row
    (4, 1, 256, [7, 3], [700, 20], 96, 0.0, 16),  # gemma3-like: a window that moves with each row
    (8, 8, 32, [17], [200], 0, 30.0, 4),  # soft-cap, head_dim 32, blocks of 4
    (16, 2, 80, [6, 2], [1000, 33], 100, 0.0, 16),  # head_dim 80, a window cut inside a block
    (16, 4, 128, [40], [2100], 0, 0.0, 16),  # 40 rows over a long context: cut into several groups
    (8, 2, 64, [3, 12, 2, 1, 30, 4, 2, 5, 2], [50, 130, 18, 5, 400, 64, 33, 90, 17], 0, 0.0, 16),  # 9 sequences
]


def case_id(c):
    return f"h{c[0]}kv{c[1]}d{c[2]}q{sum(c[3])}s{len(c[3])}w{c[5]}c{c[6]:g}b{c[7]}"


def decode_meta(meta: AttentionMetadata, k: int) -> tuple[AttentionMetadata, list[int]]:
    """One row per sequence: sequence s's row min(k, q_len - 1) as a decode at its position; and the
    rows of meta those are."""
    qsl, rows, lens, slots = meta.query_start_loc, [], [], []
    for s in range(len(meta.seq_lens)):
        n = qsl[s + 1] - qsl[s]
        i = min(k, n - 1)
        rows.append(qsl[s] + i)
        lens.append(meta.seq_lens[s] - (n - 1 - i))
        slots.append(0)
    return AttentionMetadata(list(range(len(rows) + 1)), lens, meta.block_tables, torch.tensor(slots),
                             meta.block_size), rows


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_row_groups_give_each_row_its_decode_bits(case, dtype):
    heads, kvh, d, q_lens, ctx_lens, window, softcap, bs = case
    g = torch.Generator().manual_seed(sum(ctx_lens) + d)
    nb = sum(-(-c // bs) for c in ctx_lens) + 8
    meta = scattered_batch(q_lens, ctx_lens, bs, nb, g)
    cache = (torch.randn(2, nb, bs, kvh, d, generator=g) * 2).to(dtype)
    q = torch.randn(sum(q_lens), heads, d, generator=g)
    scale = d ** -0.5 * 3
    grouped = paged_attention(q, cache, meta, scale, window, softcap)
    with native.row_groups(False):
        alone = paged_attention(q, cache, meta, scale, window, softcap)
    assert torch.equal(grouped, alone)
    for k in range(max(q_lens)):
        dmeta, rows = decode_meta(meta, k)
        one = paged_attention(q[rows].contiguous(), cache, dmeta, scale, window, softcap)
        for i, r in enumerate(rows):
            assert torch.equal(one[i], grouped[r]), f"row {r} (sequence {i}, row {k}) differs from its decode"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("base,window,bs", [(110, 0, 16), (300, 64, 16), (3, 0, 4), (517, 0, 16)])
def test_row_groups_of_a_tree_equal_its_rows_alone(base, window, bs, dtype):
    """A tree's node rows (each its own path keys from the tree's base) and its sequence's ordinary
    row in one group: the bits of each alone (test_tree_attention: alone == a decode of the path)."""
    heads, kvh, d = 12, 2, 128
    g = torch.Generator().manual_seed(base + bs)
    meta = tree_meta(base, PARENTS, bs, g, others=2)
    cache = (torch.randn(2, 512, bs, kvh, d, generator=g) * 2).to(dtype)
    q = torch.randn(meta.query_start_loc[-1], heads, d, generator=g)
    grouped = paged_attention(q, cache, meta, d ** -0.5 * 3, window, 0.0)
    with native.row_groups(False):
        alone = paged_attention(q, cache, fresh(meta), d ** -0.5 * 3, window, 0.0)
    assert torch.equal(grouped, alone)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_a_decode_rows_bits_follow_neither_the_threads_nor_the_batch(dtype):
    """Decode rows of 300 to 3000 keys (split into ranges, each range's probabilities rounded against its
    own max): the same bits at 1, 2 and 3 threads, and each row alone as in a batch of seven. Until 2026-12-07
    the split followed the thread count and the batch, and greedy decode changed with --threads."""
    heads, kvh, d, bs = 9, 3, 64, 16
    ctx = [300, 3000, 700, 1, 257, 1500, 40]
    g = torch.Generator().manual_seed(7)
    nb = sum(-(-c // bs) for c in ctx) + 8
    meta = scattered_batch([1] * len(ctx), ctx, bs, nb, g)
    cache = (torch.randn(2, nb, bs, kvh, d, generator=g) * 2).to(dtype)
    q = torch.randn(len(ctx), heads, d, generator=g)
    threads = torch.get_num_threads()
    try:
        out = {}
        for t in (1, 2, 3):
            torch.set_num_threads(t)
            out[t] = paged_attention(q, cache, meta, d ** -0.5, 0, 0.0)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(out[1], out[2]) and torch.equal(out[1], out[3])
    for s in range(len(ctx)):
        alone = AttentionMetadata([0, 1], [ctx[s]], [meta.block_tables[s]], torch.tensor([0]), bs)
        assert torch.equal(paged_attention(q[s:s + 1].contiguous(), cache, alone, d ** -0.5, 0, 0.0)[0], out[2][s]), s
