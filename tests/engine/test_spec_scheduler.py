"""Several tokens per step in the scheduler and KV manager, by exact block ids, with the counting
runner (a draft is accepted while it is its predecessor + 1) and planted drafts."""

from __future__ import annotations

import pytest

from hearth.engine.engine_core import EngineCore
from hearth.engine.kv_cache_manager import KVCacheManager
from hearth.engine.scheduler import Scheduler
from hearth.kvstore.block_hash import chain_hashes
from hearth.sampling_params import SamplingParams
from hearth.spec_decode.config import SpeculativeConfig
from hearth.spec_decode.policy import SpeculativeDecoder

from tests.engine.fakes import CountingRunner, LetterTokenizer, ScriptedProposer
from tests.engine.test_scheduler import run_all


def make_spec_engine(drafts, num_blocks=16, block_size=4, budget=16, seals=False, disk=None, k=4):
    """drafts: request -> its planted drafts for the next step."""
    kv = KVCacheManager(num_blocks, block_size, seals_full_blocks=seals, disk=disk)
    sched = Scheduler(kv, 8, budget)
    spec = SpeculativeDecoder(SpeculativeConfig(num_speculative_tokens=k, disable_by_batch_size=0))
    spec.proposer = ScriptedProposer(drafts)
    runner = CountingRunner()
    return EngineCore(sched, runner, LetterTokenizer(), 256, 50, spec), sched, runner


def tokens_of(outs):
    return {rid: sum((o.new_token_ids for o in v), []) for rid, v in outs.items()}


def test_accept_rollback_trim_and_hashes_by_exact_block_ids():
    plan = iter([[9, 9, 9, 9], [6, 7, 9, 9], [9, 10, 11, 12], [14, 15, 16, 17]])
    engine, sched, runner = make_spec_engine(lambda r: next(plan))
    pool, kv = sched.kv.pool, sched.kv
    engine.add_request([1, 2, 3], SamplingParams(max_tokens=12, temperature=0), "a")
    engine.step()  # prefill: no drafts yet (the proposer only sees decoding requests)
    (req,) = sched.running
    assert (req.output_token_ids, req.block_ids, req.num_computed_tokens) == ([4], [0], 3)

    engine.step()  # positions 3..7 need block 1; every draft rejected: block 1 goes back
    seq = runner.steps[-1].seqs[0]
    assert (seq.token_ids, seq.spec_token_ids, seq.block_ids) == ([4], [9, 9, 9, 9], [0, 1])
    assert (req.output_token_ids, req.num_computed_tokens, req.block_ids) == ([4, 5], 4, [0])
    assert pool.ref_cnt[:3] == [1, 0, 0] and pool.num_free == 15
    assert pool.block_hash[0] == chain_hashes(kv.cache_key, [1, 2, 3, 4], 4)[0]

    engine.step()  # 2 of 4 accepted: positions 4..8 took blocks 1, 2; block 2 held only rejects
    seq = runner.steps[-1].seqs[0]
    assert (seq.start_pos, seq.block_ids) == (4, [0, 1, 2])
    assert (req.output_token_ids, req.num_computed_tokens, req.block_ids) == ([4, 5, 6, 7, 8], 7, [0, 1])
    assert pool.ref_cnt[:3] == [1, 1, 0]
    assert pool.block_hash[1] is None  # positions 4..7 hold 5, 6, 7 and the uncomputed bonus 8

    engine.step()  # all accepted: blocks 1 and 2 full of committed tokens, registered
    assert req.output_token_ids == list(range(4, 14)) and req.num_computed_tokens == 12
    assert req.block_ids == [0, 1, 2] and pool.num_cached == 3
    assert [pool.block_hash[b] for b in (0, 1, 2)] == chain_hashes(kv.cache_key, list(range(1, 13)), 4)

    outs = run_all(engine)  # 10 of 12 tokens: one draft fits before max_tokens, then the bonus
    assert [so for so in runner.steps if so.seqs][-1].seqs[0].spec_token_ids == [14]
    assert tokens_of(outs)["a"] == [14, 15] and outs["a"][-1].finish_reason == "length"
    assert pool.num_free == 16
    s = engine.spec.stats
    assert (s.num_drafts, s.num_draft_tokens, s.num_accepted_tokens, s.accepted_per_pos) == (4, 13, 7, [3, 2, 1, 1])


def test_drafts_trimmed_to_the_budget_and_max_len():
    engine, sched, runner = make_spec_engine(lambda r: [r.output_token_ids[-1] + 1 + i for i in range(8)],
                                             budget=4, k=8)
    engine.add_request([1, 2, 3], SamplingParams(max_tokens=40, temperature=0), "a")
    outs = run_all(engine)
    assert tokens_of(outs)["a"] == [(4 + i) % 50 for i in range(40)]
    assert all(so.num_tokens <= 4 for so in runner.steps)
    assert max(len(s.spec_token_ids) for so in runner.steps for s in so.seqs) == 3


def test_quantized_cache_never_seals_a_block_on_a_draft():
    """A sealing format encodes a block when its last slot is written: drafts stop before it."""
    engine, _, runner = make_spec_engine(lambda r: [r.output_token_ids[-1] + 1 + i for i in range(6)],
                                         seals=True, k=6, num_blocks=32)
    engine.add_request([1, 2, 3], SamplingParams(max_tokens=30, temperature=0), "a")
    outs = run_all(engine)
    assert tokens_of(outs)["a"] == [(4 + i) % 50 for i in range(30)]
    drafted = [(s.start_pos, len(s.spec_token_ids)) for so in runner.steps for s in so.seqs if s.spec_token_ids]
    assert drafted and max(k for _, k in drafted) == 3  # block size 4: slots 0-2 after a token in slot 3
    for start, k in drafted:
        assert all((start + 1 + i) % 4 != 3 for i in range(k)), (start, k)


@pytest.mark.parametrize("case", ["stop_token", "eos", "stop_string"])
def test_a_stop_inside_an_accepted_run_ends_it_there(case):
    engine, sched, _ = make_spec_engine(lambda r: [r.output_token_ids[-1] + 1 + i for i in range(4)], num_blocks=32)
    params = dict(stop_token_ids=[7]) if case == "stop_token" else dict(stop=["gh"]) if case == "stop_string" else {}
    prompt = [45] if case == "eos" else [1]
    engine.add_request(prompt, SamplingParams(max_tokens=20, temperature=0, **params), "a")
    outs = run_all(engine)["a"]
    want = {"stop_token": [2, 3, 4, 5, 6, 7], "eos": [46, 47, 48, 49, 0], "stop_string": [2, 3, 4, 5, 6, 7]}[case]
    assert sum((o.new_token_ids for o in outs), []) == want
    assert outs[-1].finish_reason == "stop" and sched.kv.pool.num_free == 32
    if case == "stop_string":  # tokens 6, 7 spell "gh": cut before it, and nothing after it
        assert "".join(o.new_text for o in outs) == "cdef" and outs[-1].stop_reason == "gh"


def test_min_tokens_bans_every_draft_row_before_it():
    engine, _, runner = make_spec_engine(lambda r: [r.output_token_ids[-1] + 1 + i for i in range(4)], num_blocks=32)
    engine.add_request([1], SamplingParams(max_tokens=20, min_tokens=3, temperature=0), "a")
    run_all(engine)
    seq = [so for so in runner.steps if so.seqs][1].seqs[0]  # 1 output token so far: rows 0 and 1 sample outputs 2 and 3
    assert seq.spec_token_ids and seq.banned_token_ids == [0] and seq.banned_rows == 2


class RecordingDisk:
    def __init__(self):
        self.put_hashes = []

    def contains(self, h):
        return False

    def get_many(self, hashes):
        return []

    def put(self, h, payload):
        self.put_hashes.append(h)

    def close(self):
        pass


def test_disk_tier_and_prefix_cache_only_see_committed_blocks():
    import random

    rng = random.Random(0)
    disk = RecordingDisk()

    def drafts(r):  # a random mix of right and wrong drafts
        last = r.output_token_ids[-1]
        return [(last + 1 + i) % 50 if rng.random() < 0.7 else 13 for i in range(4)]

    engine, sched, runner = make_spec_engine(drafts, num_blocks=64, disk=disk)
    runner.execute = _with_saves(runner.execute)
    engine.add_request([1, 2, 3], SamplingParams(max_tokens=40, temperature=0, ignore_eos=True), "a")
    outs = tokens_of(run_all(engine))
    committed = [1, 2, 3] + outs["a"]
    good = set(chain_hashes(sched.kv.cache_key, committed, 4))
    assert disk.put_hashes and set(disk.put_hashes) <= good
    pool = sched.kv.pool
    assert {pool.block_hash[b] for b in range(64) if pool.block_hash[b] is not None} <= good


def _with_saves(execute):
    def run(so):
        out = execute(so)
        out.kv_saved = [b"x"] * len(so.kv_saves)
        return out
    return run


def test_policy_pauses_a_request_whose_drafts_keep_failing_and_reprobes():
    engine, _, runner = make_spec_engine(lambda r: [13, 13, 13, 13], num_blocks=64)
    engine.spec.proposer.obey_k = True  # the defaults: pause after 3 misses for 8 steps
    engine.add_request([1], SamplingParams(max_tokens=30, temperature=0), "a")
    run_all(engine)
    drafted = [bool(so.seqs[0].spec_token_ids) for so in runner.steps if so.seqs]
    # step 0 prefills; 3 misses, then a pause of 8 steps, 3 more misses, a pause of 16 ...
    assert drafted[:13] == [False] + [True] * 3 + [False] * 8 + [True]
    ks = [len(so.seqs[0].spec_token_ids) for so in runner.steps if so.seqs][1:4]
    assert ks == [4, 1, 1]  # after a miss: accepted + 1 drafts
    s = engine.spec.stats  # the policy's decisions, counted: every decode step drafted or paused
    assert s.num_steps == len(drafted) - 1 and s.num_steps_drafting == sum(drafted) == s.num_drafts
    assert s.num_paused == s.num_steps - s.num_steps_drafting > 0 and s.num_steps_batch_off == 0


def test_no_drafts_in_a_batch_large_enough_to_be_compute_bound():
    engine, _, runner = make_spec_engine(lambda r: [r.output_token_ids[-1] + 1], num_blocks=64)
    engine.spec = SpeculativeDecoder(SpeculativeConfig(disable_by_batch_size=3))
    engine.spec.proposer = ScriptedProposer(lambda r: [r.output_token_ids[-1] + 1])
    for i in range(3):
        engine.add_request([1 + i], SamplingParams(max_tokens=4, temperature=0), str(i))
    run_all(engine)
    assert not any(s.spec_token_ids for so in runner.steps for s in so.seqs)
    s = engine.spec.stats
    assert s.num_steps == s.num_steps_batch_off > 0 and s.num_steps_drafting == 0


def test_drafts_never_push_a_step_into_the_next_kernel_regime():
    """With regimes at 10 and 64 rows: 3 decodes keep to 9 rows (drafts of the last ones dropped
    first); no block is taken for a draft the cap drops."""
    engine, sched, runner = make_spec_engine(lambda r: [r.output_token_ids[-1] + 1 + i for i in range(5)],
                                             num_blocks=64, budget=64, k=5)
    sched.row_regimes = (10, 64)
    for i in range(3):
        engine.add_request([1 + i], SamplingParams(max_tokens=30, temperature=0), str(i))
    run_all(engine)
    steps = [so for so in runner.steps if so.seqs and any(s.spec_token_ids for s in so.seqs)]
    assert steps and all(so.num_tokens <= 9 for so in steps if len(so.seqs) == 3)
    first = steps[0]
    assert [len(s.spec_token_ids) for s in first.seqs] == [5, 1, 0]
    assert sched.kv.pool.num_free == 64


def test_no_drafts_in_a_step_whose_prompt_chunk_puts_it_in_another_regime_than_its_decodes():
    """A draft's row is the one the next step would decode without drafts: 2 decodes beside a 12-token
    prompt chunk (14 rows, past the first regime at 10) would sum it in the batch GEMMs, where the next
    plain step (3 decodes) runs the GEMV, so that step drafts nothing; the steps around it draft."""
    engine, sched, runner = make_spec_engine(lambda r: [r.output_token_ids[-1] + 1 + i for i in range(3)],
                                             num_blocks=64, budget=64, k=3)
    sched.row_regimes, sched.verify_rows = (10, 64), 63
    for i in range(2):
        engine.add_request([1 + i], SamplingParams(max_tokens=12, temperature=0), str(i))
    engine.step()  # the two prompts
    engine.step()  # two decodes, drafting
    engine.add_request(list(range(30, 42)), SamplingParams(max_tokens=12, temperature=0), "late")
    engine.step()
    engine.step()
    before, mixed, after = runner.steps[-3:]
    assert [len(s.spec_token_ids) for s in before.seqs] == [3, 3]
    assert mixed.num_tokens == 14 and [len(s.spec_token_ids) for s in mixed.seqs] == [0, 0, 0]
    assert [len(s.spec_token_ids) for s in after.seqs] == [3, 3, 3]


def test_verify_rows_lift_the_cap_while_the_real_rows_stay_in_the_first_regime():
    """With regimes at 10 and 64 and verify_rows 20: one decoding request verifies 19 drafts (20
    rows, past the first regime: the runner keeps such a step on the GEMV); with 10 real rows the
    regimes cap the step again (below 64), and without verify_rows at 9 rows."""
    for verify_rows, want in ((20, 19), (0, 8)):
        engine, sched, runner = make_spec_engine(lambda r: [r.output_token_ids[-1] + 1 + i for i in range(30)],
                                                 num_blocks=64, budget=64, k=30)
        sched.row_regimes, sched.verify_rows = (10, 64), verify_rows
        engine.add_request([1], SamplingParams(max_tokens=60, temperature=0), "a")
        run_all(engine)
        first = next(so for so in runner.steps if so.seqs and so.seqs[0].spec_token_ids)
        assert len(first.seqs[0].spec_token_ids) == want
    engine, sched, runner = make_spec_engine(lambda r: [r.output_token_ids[-1] + 1 + i for i in range(30)],
                                             num_blocks=256, budget=128, k=30)
    sched.row_regimes, sched.verify_rows, sched.max_num_seqs = (10, 64), 20, 16
    for i in range(10):
        engine.add_request([1 + i], SamplingParams(max_tokens=8, temperature=0), str(i))
    run_all(engine)
    steps = [so for so in runner.steps if len(so.seqs) == 10 and any(s.spec_token_ids for s in so.seqs)]
    assert steps and max(so.num_tokens for so in steps) == 63


def test_spec_counters_reach_metrics():
    """Through the real AsyncEngine.stats(), which copies the engine thread's live counters."""
    from types import SimpleNamespace

    from hearth.api.metrics import Metrics
    from hearth.engine.async_engine import AsyncEngine

    engine, _, _ = make_spec_engine([[0, 0, 0], [9, 9]])
    spec = engine.spec.stats
    spec.num_drafts, spec.num_draft_tokens, spec.num_accepted_tokens = 3, 12, 7
    spec.num_steps, spec.num_steps_drafting, spec.num_steps_batch_off, spec.num_paused = 9, 3, 2, 4
    spec.num_paused_failing, spec.num_paused_not_paying = 1, 3
    spec.accepted_per_pos[:] = [3, 2, 1, 1]
    stats = AsyncEngine(engine).stats()
    assert stats.spec == spec and stats.spec is not spec and stats.spec.accepted_per_pos is not spec.accepted_per_pos

    class Engine:
        def stats(self):
            return stats

    served = SimpleNamespace(name="m", engine=Engine())  # what Metrics reads of a loaded model
    text = Metrics(lambda: [served]).render().decode()
    for line in ('hearth:spec_decode_num_drafts_total{model_name="m"} 3.0',
                 'hearth:spec_decode_num_draft_tokens_total{model_name="m"} 12.0',
                 'hearth:spec_decode_num_accepted_tokens_total{model_name="m"} 7.0',
                 'hearth:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="1"} 2.0',
                 'hearth:spec_decode_policy_steps_total{model_name="m"} 9.0',  # why drafts were few
                 'hearth:spec_decode_policy_steps_drafting_total{model_name="m"} 3.0',
                 'hearth:spec_decode_policy_steps_batch_off_total{model_name="m"} 2.0',
                 'hearth:spec_decode_policy_paused_total{model_name="m"} 4.0',  # the name dashboards read
                 'hearth:spec_decode_policy_paused_failing_total{model_name="m"} 1.0',  # and why
                 'hearth:spec_decode_policy_paused_not_paying_total{model_name="m"} 3.0'):
        assert line in text, line
    helps = [line for line in text.splitlines() if line.startswith("# HELP hearth:spec_decode_policy_paused")]
    assert len(helps) == 3 and "either reason" in helps[0] and "kept failing" not in helps[0]  # it said only that


def _two_decoders(num_blocks):
    """a (3 prompt tokens, block 0) drafts its right next tokens; b (4 prompt tokens, block 1)
    drafts nothing and needs a fresh block for its first output token's K/V next step."""
    engine, sched, runner = make_spec_engine(
        lambda r: [r.output_token_ids[-1] + 1 + i for i in range(4)] if r.request_id == "a" else [],
        num_blocks=num_blocks)
    engine.add_request([1, 2, 3], SamplingParams(max_tokens=20, temperature=0), "a")
    engine.add_request([11, 12, 13, 14], SamplingParams(max_tokens=20, temperature=0), "b")
    engine.step()  # both prefill
    a, b = sched.running
    assert (a.block_ids, b.block_ids) == ([0], [1])
    return engine, sched, runner, a, b


def test_drafts_never_take_the_block_a_later_request_needs():
    """One free block (2): b's real token gets it, a's drafts get what is left of its block 0
    (nothing: its next token fills slot 3). Allocating a's drafts first gave a block 2 and
    preempted b."""
    engine, sched, runner, a, b = _two_decoders(num_blocks=3)
    engine.step()
    seqs = {s.request_id: s for s in runner.steps[-1].seqs}
    assert sched.num_preemptions == 0 and [r.request_id for r in sched.running] == ["a", "b"]
    assert (seqs["a"].block_ids, seqs["a"].spec_token_ids) == ([0], [])
    assert seqs["b"].block_ids == [1, 2]
    assert (a.block_ids, b.block_ids) == ([0], [1, 2]) and sched.kv.pool.num_free == 0


def test_drafts_take_only_blocks_left_after_every_real_token():
    """Two free blocks (2, 3): b's token takes block 2 (the first handed out), a's four drafts
    block 3; they are all accepted, so a keeps it."""
    engine, sched, runner, a, b = _two_decoders(num_blocks=4)
    engine.step()
    seqs = {s.request_id: s for s in runner.steps[-1].seqs}
    assert (seqs["a"].block_ids, seqs["a"].spec_token_ids) == ([0, 3], [5, 6, 7, 8])
    assert seqs["b"].block_ids == [1, 2] and sched.num_preemptions == 0
    assert (a.output_token_ids, a.block_ids, a.num_computed_tokens) == ([4, 5, 6, 7, 8, 9], [0, 3], 8)
    assert b.block_ids == [1, 2] and sched.kv.pool.num_free == 0


def test_drafts_never_delay_an_admission():
    """c arrives while a drafts: c's prompt gets the last free block before a's drafts do."""
    engine, sched, runner, a, b = _two_decoders(num_blocks=4)
    engine.add_request([21, 22], SamplingParams(max_tokens=4, temperature=0), "c")
    engine.step()
    seqs = {s.request_id: s for s in runner.steps[-1].seqs}
    assert list(seqs) == ["a", "b", "c"] and sched.num_preemptions == 0
    assert (seqs["a"].block_ids, seqs["a"].spec_token_ids) == ([0], [])
    assert (seqs["b"].block_ids, seqs["c"].block_ids) == ([1, 2], [3])
