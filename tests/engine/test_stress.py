"""A randomized stress run of the engine: 64 requests of mixed lengths with shared prefixes, a pool
small enough to force preemption, random aborts and new arrivals. After every step each block's
reference count equals the number of live requests holding it, free and held blocks partition the
pool, a block shared by two requests is the same cached prefix block for both, every step reads
exactly the tokens each request's earlier positions hold (a runner that writes token ids into a fake
KV cache checks that), and every output follows the runner's rule."""

import random
from collections import Counter

import pytest

from hearth.engine.request import RequestStatus
from hearth.sampling_params import SamplingParams

from hearth.spec_decode.config import SpeculativeConfig
from hearth.spec_decode.policy import SpeculativeDecoder
from tests.engine.fakes import CountingRunner, ScriptedProposer
from tests.engine.test_scheduler import make_engine

VOCAB = 50


class KVCheckingRunner(CountingRunner):
    """Writes each computed token id into its KV slot and, before computing, checks that every
    earlier position's slot holds that request's token there: a wrong block table, a prefix block
    shared by mistake or a wrong num_computed_tokens reads someone else's token."""

    def __init__(self, block_size: int):
        super().__init__(VOCAB)
        self.block_size, self.slots, self.tokens = block_size, {}, {}

    def execute(self, so):
        bs = self.block_size
        for s in so.seqs:
            known = self.tokens[s.request_id]
            for pos in range(s.start_pos):
                slot = s.block_ids[pos // bs] * bs + pos % bs
                assert self.slots.get(slot) == known[pos], f"{s.request_id} position {pos} reads a wrong K/V"
            assert s.token_ids == known[s.start_pos : s.start_pos + len(s.token_ids)]
            for i, t in enumerate(s.token_ids + s.spec_token_ids):  # drafts write K/V too
                pos = s.start_pos + i
                self.slots[s.block_ids[pos // bs] * bs + pos % bs] = t
        out = super().execute(so)
        for rid, sampled in out.sampled.items():
            self.tokens[rid].extend(t.token_id for t in out.accepted.get(rid, []) + [sampled])
        return out


def check_invariants(sched) -> None:
    kv, pool = sched.kv, sched.kv.pool
    live = list(sched.running) + list(sched.waiting)
    holders = Counter()
    for req in live:
        held = req.block_ids
        assert len(set(held)) == len(held), f"{req.request_id} holds a block twice"
        holders.update(held)
        assert len(req.block_ids) >= kv.blocks_needed(req.num_computed_tokens)
    for block in range(pool.num_blocks):
        assert pool.ref_cnt[block] == holders[block], f"block {block}: ref {pool.ref_cnt[block]} != {holders[block]}"
    assert pool.num_free == sum(1 for b in range(pool.num_blocks) if holders[b] == 0)
    for block, n in holders.items():
        if n > 1:  # shared: must be a cached full block at the same place in every holder's chain 
            h = pool.block_hash[block]
            assert h is not None, f"block {block} shared by {n} requests but not a cached block"
            for req in live:
                if block in req.block_ids:
                    i = req.block_ids.index(block)
                    assert kv.block_hashes(req, i + 1)[i] == h


def follows_rule(prompt, output) -> bool:
    last = prompt[-1]
    for t in output:
        if t != (last + 1) % VOCAB:
            return False
        last = t
    return True


def random_drafts(rng):
    """Up to 5 drafts, each its predecessor + 1 (accepted) with probability 0.7, else a wrong one."""
    def propose(req):
        last, out = req.all_token_ids[-1], []
        for _ in range(rng.randrange(0, 6)):
            last = (last + 1) % VOCAB if rng.random() < 0.7 else (last + 7) % VOCAB
            out.append(last)
        return out
    return propose


@pytest.mark.parametrize("seed,sealing,spec", [(0, False, False), (1, False, False), (2, False, False),
                                               (3, True, False), (4, False, True), (5, True, True), (6, False, True)])
def test_random_traffic_keeps_every_block_invariant(seed, sealing, spec):
    """sealing: a quantized cache's rule (drafts never reach a block's last slot); spec: random
    drafts, right and wrong, verified by the counting rule (rejected K/V is rolled back)."""
    rng = random.Random(seed)
    engine, sched, _ = make_engine(num_blocks=40, block_size=4, max_seqs=12, budget=24, max_len=400)
    engine.runner = runner = KVCheckingRunner(block_size=4)
    sched.kv.seals_full_blocks = sealing
    if spec:
        engine.spec = SpeculativeDecoder(SpeculativeConfig(num_speculative_tokens=5, disable_by_batch_size=0))
        engine.spec.proposer = ScriptedProposer(random_drafts(random.Random(seed)))
    prefixes = [[rng.randrange(1, VOCAB) for _ in range(rng.choice([4, 8, 12]))] for _ in range(4)]
    pending = []
    for i in range(64):
        tail = [rng.randrange(1, VOCAB) for _ in range(rng.randrange(1, 30))]
        prompt = rng.choice(prefixes) + tail if rng.random() < 0.6 else tail
        params = SamplingParams(max_tokens=rng.randrange(1, 40), temperature=0, ignore_eos=True)
        pending.append((f"r{i}", prompt, params))
    prompts = {rid: prompt for rid, prompt, _ in pending}
    outputs, finished, aborted = {}, {}, set()
    steps = 0
    while pending or engine.has_unfinished():
        for _ in range(rng.randrange(0, 4)):
            if pending:
                rid, prompt, params = pending.pop(0)
                runner.tokens[rid] = list(prompt)
                engine.add_request(prompt, params, rid)
        live = [r.request_id for r in list(sched.running) + list(sched.waiting)]
        if live and rng.random() < 0.1:
            victim = rng.choice(live)
            engine.abort(victim)
            aborted.add(victim)
        for out in engine.step():
            outputs.setdefault(out.request_id, []).extend(out.new_token_ids)
            if out.finished:
                finished[out.request_id] = out.finish_reason
        check_invariants(sched)
        steps += 1
        assert steps < 5000
    assert sched.kv.pool.num_free == 40 and not sched.running and not sched.waiting
    assert sched.num_preemptions > 0 and sched.kv.stats.hits > 0  # the run exercised both
    if spec:
        st = engine.spec.stats
        assert st.num_accepted_tokens > 100 and st.num_draft_tokens > st.num_accepted_tokens
    assert set(finished) | aborted == set(prompts)
    for rid, reason in finished.items():
        assert reason == RequestStatus.FINISHED_LENGTH.value
        assert follows_rule(prompts[rid], outputs[rid]), rid
