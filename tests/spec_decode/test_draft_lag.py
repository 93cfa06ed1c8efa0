"""The draft model computes a sequence's tokens only in steps where it drafts for it, and the
blocks whose draft K/V it wrote (valid_blocks), by exact positions: a fake model that records
every forward and always predicts token 7."""

from __future__ import annotations

import torch

from hearth.backends.base import Backend
from hearth.runner.drafter import DraftModel
from hearth.runner.messages import ScheduledSequence, SchedulerOutput
from hearth.sampling_params import SamplingParams


class RecordingModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls: list[list[int]] = []  # positions of each forward
        self.backend = Backend()  # builds the step's metadata

    def forward(self, ids, positions, meta, kv_caches, out_rows):
        self.calls.append(positions.tolist())
        return torch.zeros(len(out_rows), 2)

    def compute_logits(self, hidden):
        logits = torch.zeros(len(hidden), 10)
        logits[:, 7] = 1.0
        return logits


class Cfg:
    num_kv_heads, head_dim, num_layers, hidden_size, conv_layers = 1, 2, 1, 2, ()
    # what hearth.config.layer_caches also reads: one head dim, no KV-shared nor recurrent layers
    head_dim_swa, layer_kv_heads, kv_shared_layers, sliding_window_pattern, recurrent_layers = 0, (), 0, (), ()


def drafter(bs=4):
    return DraftModel(RecordingModel(), Cfg(), num_blocks=16, block_size=bs, max_rows=6)


def seq(rid, tokens, start, blocks, slots=0, prefix=()):
    return ScheduledSequence(rid, list(tokens), start, list(blocks), True, SamplingParams(temperature=0), [],
                             prefix_token_ids=list(prefix), num_draft_slots=slots)


def step(d, *seqs):
    filled = d.draft(SchedulerOutput(list(seqs)), lambda rid, p: None)
    d.observe(type("Out", (), {"accepted": {}})())  # nothing accepted
    return filled


def test_no_draft_forward_without_slots_then_one_catch_up():
    d = drafter()
    step(d, seq("a", [1, 2, 3, 4, 5], 0, [0, 1]))  # a prefill: queued only
    step(d, seq("a", [6], 5, [0, 1]))  # paused decode: queued only
    assert d.model.calls == []
    out = step(d, seq("a", [7], 6, [0, 1], slots=2))
    # 7 queued tokens <= LAG: one forward over positions 0..6, then the second draft's row
    assert d.model.calls == [list(range(7)), [7]]
    assert out.seqs[0].spec_token_ids == [7, 7]
    assert d.valid_blocks == {0}  # block 1 holds positions 4..7: 7 is a draft's


def test_a_long_queue_is_caught_up_as_a_prefill_in_pieces_before_its_last_token():
    d = drafter()
    step(d, seq("a", list(range(1, 14)), 0, [0, 1, 2, 3]))
    step(d, seq("a", [14], 13, [0, 1, 2, 3], slots=1))
    assert d.model.calls == [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11], [12], [13]]
    assert d.valid_blocks == {0, 1, 2}


def test_a_prefix_hit_catches_up_from_its_first_block_without_valid_draft_kv():
    d = drafter()
    step(d, seq("a", list(range(1, 9)), 0, [0, 1], slots=1))  # blocks 0, 1 computed with the draft
    assert d.valid_blocks == {0, 1}
    d.invalidate([1])  # block 1 reloaded from the disk tier
    d.model.calls.clear()
    step(d, seq("b", [9], 8, [0, 1, 2], slots=1, prefix=range(1, 9)))
    # block 0 kept; block 1 recomputed as the target computed it (a prefill), then b's token
    assert d.model.calls == [[4, 5, 6, 7], [8]]
    assert d.valid_blocks == {0, 1}


def test_a_prefix_hit_without_slots_computes_nothing_until_it_drafts():
    """A batch too big to draft in (64 requests sharing a prompt) must not pay the draft's prefill
    of every hit: the hit's blocks wait like a prompt, then come as the same prefill."""
    d = drafter()
    step(d, seq("a", list(range(1, 9)), 0, [0, 1], slots=1))
    d.invalidate([1])
    d.model.calls.clear()
    step(d, seq("b", [9], 8, [0, 1, 2], prefix=range(1, 9)))  # no slots: drafts off
    step(d, seq("b", [10], 9, [0, 1, 2]))
    assert d.model.calls == []
    step(d, seq("b", [11], 10, [0, 1, 2], slots=1))
    assert d.model.calls == [[4, 5, 6, 7], [8, 9, 10]]  # positions: the hit as it was, then the queue
    assert not d.steady  # a catch-up, not a step's price


def test_blocks_the_target_fills_while_the_draft_lags_lose_their_draft_kv():
    d = drafter()
    step(d, seq("a", list(range(1, 5)), 0, [3], slots=1))
    assert d.valid_blocks == {3}
    d.forget("a")  # block 3 freed, handed to b, whose draft is paused while the target fills it
    step(d, seq("b", [1, 2, 3, 4], 0, [3]))
    assert d.valid_blocks == set()
    d.model.calls.clear()
    step(d, seq("c", [5], 4, [3, 4], slots=1, prefix=[1, 2, 3, 4]))
    assert d.model.calls == [[0, 1, 2, 3], [4]]
