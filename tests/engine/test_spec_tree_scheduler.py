"""Token trees in the scheduler and KV manager, by exact block ids, with the counting runner (a
node is accepted when it is its parent + 1): a side branch accepted, rejected nodes rolled back,
trees cut to the regime cap as prefixes of their nodes, a sealing (quantized) format taking the
top-1 chain, and the K/V moves that put an accepted path where a decode would have."""

from __future__ import annotations

import torch

from hearth.kvstore.block_hash import chain_hashes
from hearth.runner.messages import ScheduledSequence
from hearth.runner.tree_paths import move_path, tree_moves
from hearth.sampling_params import SamplingParams
from hearth.spec_decode.tree import DraftTree

from tests.engine.test_scheduler import run_all
from tests.engine.test_spec_scheduler import make_spec_engine, tokens_of

#            root (next token 4)
#          /       \
#       0:9         1:5
#        |        /  |   \
#       2:7    3:6  4:8
#               |
#              5:7
SIDE = DraftTree([9, 5, 7, 6, 8, 7], [-1, -1, 0, 1, 1, 3])


def test_a_side_branch_is_accepted_and_the_rest_rolled_back_by_exact_block_ids():
    plan = iter([SIDE, DraftTree([99, 98], [-1, -1])])
    engine, sched, runner = make_spec_engine(lambda r: next(plan, []), k=8)
    pool, kv = sched.kv.pool, sched.kv
    engine.add_request([1, 2, 3], SamplingParams(max_tokens=12, temperature=0), "a")
    engine.step()  # prefill
    (req,) = sched.running
    engine.step()  # next token 4 at position 3, the 6 nodes at 4..9: blocks 0, 1, 2
    seq = runner.steps[-1].seqs[0]
    assert (seq.token_ids, seq.spec_token_ids, seq.spec_parents, seq.block_ids) == (
        [4], SIDE.tokens, SIDE.parents, [0, 1, 2])
    # path 1 -> 3 -> 5 (5, 6, 7), bonus 8; valid K/V: positions 0..6 (after the moves): block 2 freed
    assert (req.output_token_ids, req.num_computed_tokens, req.block_ids) == ([4, 5, 6, 7, 8], 7, [0, 1])
    assert pool.ref_cnt[:3] == [1, 1, 0] and pool.num_free == 14
    assert pool.block_hash[0] == chain_hashes(kv.cache_key, [1, 2, 3, 4], 4)[0] and pool.block_hash[1] is None
    s = engine.spec.stats
    assert (s.num_draft_tokens, s.num_accepted_tokens, s.num_accepted_off_chain) == (6, 3, 3)
    assert s.accepted_per_pos[:3] == [1, 1, 1]

    engine.step()  # both root children wrong: every node rolled back, the bonus 9 committed
    seq = runner.steps[-1].seqs[0]
    assert (seq.start_pos, seq.spec_token_ids, seq.block_ids) == (7, [99, 98], [0, 1, 2])
    assert (req.output_token_ids[-1], req.num_computed_tokens, req.block_ids) == (9, 8, [0, 1])
    assert [pool.block_hash[b] for b in (0, 1)] == chain_hashes(kv.cache_key, [1, 2, 3, 4, 5, 6, 7, 8], 4)
    outs = run_all(engine)
    assert tokens_of(outs)["a"] == list(range(10, 16)) and pool.num_free == 16


def test_the_accepted_paths_kv_moves_to_the_path_positions():
    """Node c sits at base + c; the path's depth-d node belongs at base + d - 1 (scattered blocks)."""
    table, bs, base = [7, 3, 12], 4, 4  # positions 4..7 in block 3, 8..11 in block 12
    slot = lambda p: table[p // bs] * bs + p % bs  # noqa: E731
    assert tree_moves(base, [1, 3, 5], table, bs) == [(slot(5), slot(4)), (slot(7), slot(5)), (slot(9), slot(6))]
    assert tree_moves(base, [0, 1], table, bs) == []  # a chain prefix is in place already
    # applied to a cache: rows land where they must, rows before the tree untouched
    cache = torch.arange(2 * 16 * bs, dtype=torch.float16).view(2, 16, bs, 1, 1)
    before = cache.clone()

    s = ScheduledSequence("a", [4], base - 1, table, True, SamplingParams(), [], spec_token_ids=SIDE.tokens,
                          spec_parents=SIDE.parents)
    move_path([cache], bs, s, [1, 3, 5])
    flat, old = cache.view(2, -1), before.view(2, -1)
    for src, dst in ((5, 4), (7, 5), (9, 6)):
        assert torch.equal(flat[:, slot(dst)], old[:, slot(src)])
    assert torch.equal(flat[:, [slot(p) for p in range(4)]], old[:, [slot(p) for p in range(4)]])


def test_a_tree_is_cut_to_the_regime_cap_as_a_prefix_of_its_nodes():
    big = DraftTree([5, 9, 6, 9, 7, 9, 8, 9, 9, 9, 9, 9], [-1, -1, 0, 0, 2, 2, 4, 4, 6, 6, 8, 8])
    engine, sched, runner = make_spec_engine(lambda r: big if r.output_token_ids == [4] else [], k=16,
                                             num_blocks=32, budget=32)
    sched.row_regimes = (10, 64)
    engine.add_request([1, 2, 3], SamplingParams(max_tokens=12, temperature=0), "a")
    engine.step()
    engine.step()
    seq = runner.steps[-1].seqs[0]
    assert seq.spec_token_ids == big.tokens[:8] and seq.spec_parents == big.parents[:8]
    (req,) = sched.running
    assert req.output_token_ids == [4, 5, 6, 7, 8, 9]  # path 0 -> 2 -> 4 -> 6, bonus 9
    run_all(engine)
    assert sched.kv.pool.num_free == 32


def test_a_sealing_kv_format_verifies_the_top1_chain_of_a_tree():
    """q8_0 and the other quantized formats: drafts sit in a block's f16 staging, where moving a
    side branch's K/V is not supported, so the scheduler sends the tree's first-child chain."""
    engine, sched, runner = make_spec_engine(lambda r: SIDE if r.output_token_ids == [4] else [], seals=True,
                                             k=8, num_blocks=32)
    engine.add_request([1, 2, 3], SamplingParams(max_tokens=12, temperature=0), "a")
    engine.step()
    engine.step()
    seq = runner.steps[-1].seqs[0]
    assert seq.spec_parents == [] and seq.spec_token_ids == SIDE.chain()[: len(seq.spec_token_ids)]
    assert seq.spec_token_ids  # [9, 7] cut before the block's last slot: [9, 7] or a prefix
    run_all(engine)
    assert sched.kv.pool.num_free == 32


def test_the_policy_keeps_half_a_tree_budget_after_a_partial_accept():
    engine, sched, runner = make_spec_engine(lambda r: DraftTree([r.output_token_ids[-1] + 1, 0, 0, 0, 0, 0],
                                                                  [-1, 0, -1, -1, -1, -1]), k=4, num_blocks=64)
    engine.spec.config = type(engine.spec.config)(num_speculative_tokens=4, tree_budget=6, disable_by_batch_size=0)
    engine.spec.proposer.obey_k = True
    engine.add_request([1], SamplingParams(max_tokens=12, temperature=0), "a")
    for _ in range(3):
        engine.step()
    sizes = [len(so.seqs[0].spec_token_ids) for so in runner.steps if so.seqs][1:3]
    assert sizes == [6, 3]  # 1 of depth 2 accepted: max(1 + 1, 6 // 2) nodes next
