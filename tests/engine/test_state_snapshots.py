"""Prefix-cache hits for a model with recurrent layers (hearth.engine.state_snapshots): a hit ends on a block whose
state snapshot is held, its first step restores that snapshot into the request's slot; snapshots are taken where
a prompt's chunk is cut to end on its last full block and on each full block of an answer (the previous one of that
answer dropped); exact ids, model-free (a fake runner whose "state" is a hash of the tokens it folded in)."""

import pytest

from hearth.engine.engine_core import EngineCore
from hearth.engine.kv_cache_manager import KVCacheManager
from hearth.engine.scheduler import Scheduler
from hearth.engine.state_snapshots import SnapshotIndex
from hearth.runner.messages import RunnerOutput, SampledToken, SchedulerOutput
from hearth.sampling_params import SamplingParams

from tests.engine.fakes import LetterTokenizer

VOCAB = 50


class StateRunner:
    """A recurrent model in miniature: each slot holds (tokens folded in, their running hash), the next token is the
    hash's; a step must find its slot holding exactly start_pos tokens (zeroed at 0, else continued or restored)."""

    def __init__(self, slots: int, snapshots: int):
        self.states = [(0, 0)] * slots
        self.snaps = [None] * snapshots
        self.steps: list[SchedulerOutput] = []
        self.fail = False
        self.skip_restore = False

    def execute(self, so: SchedulerOutput) -> RunnerOutput:
        self.steps.append(so)
        if self.fail:
            raise RuntimeError("step failed")
        sampled = {}
        for s in so.seqs:
            if s.start_pos == 0:
                self.states[s.state_slot] = (0, 0)
            if s.state_restore >= 0 and not self.skip_restore:
                self.states[s.state_slot] = self.snaps[s.state_restore]
            n, h = self.states[s.state_slot]
            if n != s.start_pos and not self.skip_restore:
                raise AssertionError(f"{s.request_id}: slot holds {n} tokens, step starts at {s.start_pos}")
            for t in s.token_ids:
                n, h = n + 1, (h * 31 + t) % 1_000_003
            self.states[s.state_slot] = (n, h)
            if s.sample:
                sampled[s.request_id] = SampledToken(1 + h % (VOCAB - 1))  # never 0: the end of generation
        saved = [s.state_snapshot for s in so.seqs if s.state_snapshot >= 0]
        for s in so.seqs:
            if s.state_snapshot >= 0:
                self.snaps[s.state_snapshot] = self.states[s.state_slot]
        return RunnerOutput(sampled, snapshots=saved)


def make_engine(snapshots=4, num_blocks=64, block_size=4, max_seqs=3, budget=16, prefix=True):
    kv = KVCacheManager(num_blocks, block_size, enable_prefix_caching=prefix, state_slots=max_seqs,
                        state_snapshots=snapshots)
    runner = StateRunner(max_seqs, snapshots)
    return EngineCore(Scheduler(kv, max_seqs, budget), runner, LetterTokenizer(), 256, VOCAB), kv, runner


def run(engine, prompt, rid, n=6):
    engine.add_request(prompt, SamplingParams(max_tokens=n, temperature=0, ignore_eos=True), rid)
    return finish(engine)[rid]


def finish(engine):
    """request id -> its output tokens, for the requests that finished."""
    tokens, done = {}, set()
    while engine.has_unfinished():
        for o in engine.step():
            tokens.setdefault(o.request_id, []).extend(o.new_token_ids)
            if o.finished:
                done.add(o.request_id)
    return {rid: tokens[rid] for rid in done}


def without_cache(prompt, n=6):
    engine, _, _ = make_engine(prefix=False)
    return run(engine, prompt, "ref", n)


def seqs(runner, rid):
    return [s for so in runner.steps for s in so.seqs if s.request_id == rid]


PROMPT = list(range(1, 11))  # 10 tokens: its last full block ends at 8


def test_a_prompt_chunk_ends_on_its_last_full_block_whose_state_is_saved():
    engine, kv, runner = make_engine()
    run(engine, PROMPT, "a", n=2)
    first, second = seqs(runner, "a")[:2]
    assert (first.start_pos, len(first.token_ids), first.state_snapshot) == (0, 8, 0)
    assert (second.start_pos, len(second.token_ids), second.state_snapshot) == (8, 2, -1)
    assert list(kv.snapshots.held.values()) == [0] and kv.snapshots.has(kv.block_hashes(engine_req(kv, PROMPT), 2)[1])


def engine_req(kv, tokens):
    from hearth.engine.request import Request

    return Request("probe", tokens, SamplingParams(), frozenset(), 256)


def test_a_shared_prefix_hits_up_to_its_snapshot_and_restores_it():
    engine, kv, runner = make_engine()
    run(engine, PROMPT, "a")
    other = PROMPT + [20, 21, 22]
    out = run(engine, other, "b")
    first = seqs(runner, "b")[0]
    assert (first.start_pos, first.state_restore) == (8, 0)  # the snapshot taken after a's 8 tokens
    assert engine.scheduler.kv.stats.hits == 8
    assert out == without_cache(other)


def test_a_hit_is_cut_back_to_the_last_block_with_a_snapshot():
    """b shares a's first 12 tokens (3 cached blocks), but only the state after 8 is held: 8 tokens hit."""
    engine, kv, runner = make_engine()
    run(engine, PROMPT + [11, 12, 13], "a", n=1)  # 13 tokens: the snapshot at 12
    kv.snapshots.drop(next(iter(kv.snapshots.held)))
    run(engine, PROMPT + [11, 12, 30, 31], "c", n=1)  # 14 tokens: its own at 12 (c's hash), a's 8 not held
    assert seqs(runner, "c")[0].start_pos == 0
    out = run(engine, PROMPT + [11, 12, 13, 40], "b", n=3)
    assert seqs(runner, "b")[0].start_pos == 12 and out == without_cache(PROMPT + [11, 12, 13, 40], 3)


def test_the_next_turn_of_a_conversation_hits_past_the_answer():
    """Turn 1: 6 prompt tokens + 9 answered (14 computed): snapshots at 4 (its prompt), then 8, then 12 (8 dropped).
    Turn 2 resends prompt + answer + new text: 12 tokens hit."""
    engine, kv, runner = make_engine()
    turn1 = [5, 6, 7, 8, 9, 10]
    answer = run(engine, turn1, "t1", n=9)
    assert [s.state_snapshot >= 0 for s in seqs(runner, "t1")].count(True) == 3
    assert len(kv.snapshots.held) == 2  # the prompt's and the answer's last
    turn2 = turn1 + answer + [33, 34, 35]
    out = run(engine, turn2, "t2")
    assert seqs(runner, "t2")[0].start_pos == 12
    assert out == without_cache(turn2)


def test_an_evicted_snapshot_is_no_hit():
    """A pool of one: b's snapshot evicts a's, so c (a's prompt again) recomputes from 0, still right."""
    engine, kv, runner = make_engine(snapshots=1)
    run(engine, PROMPT, "a", n=1)
    run(engine, [40] * 9, "b", n=1)
    assert kv.snapshots.evictions == 1
    out = run(engine, PROMPT + [7], "c")
    assert seqs(runner, "c")[0].start_pos == 0 and seqs(runner, "c")[0].state_restore == -1
    assert out == without_cache(PROMPT + [7])


def test_a_failed_step_gives_its_snapshot_slot_back_empty():
    engine, kv, runner = make_engine()
    engine.add_request(PROMPT, SamplingParams(max_tokens=2, temperature=0), "a")
    runner.fail = True
    with pytest.raises(RuntimeError):
        engine.step()
    assert seqs(runner, "a")[0].state_snapshot == 0
    assert not kv.snapshots.held and not kv.snapshots.pending and sorted(kv.snapshots.free) == [0, 1, 2, 3]


def test_requests_arriving_together_wait_for_the_snapshot_one_of_them_computes():
    engine, kv, runner = make_engine()
    for rid, extra in (("a", [50 - 1]), ("b", [48]), ("c", [47])):
        engine.add_request(PROMPT + extra, SamplingParams(max_tokens=4, temperature=0, ignore_eos=True), rid)
    outs = finish(engine)
    assert [seqs(runner, r)[0].start_pos for r in "abc"] == [0, 8, 8]
    assert outs == {r: without_cache(PROMPT + e, 4) for r, e in (("a", [49]), ("b", [48]), ("c", [47]))}


def test_hits_with_chunked_prefill_and_preemption_stay_exact():
    """Small blocks and budget: prompts in chunks, the newest preempted and recomputed (from a snapshot where one
    is held); every step checks its slot holds start_pos tokens, and the text is the uncached engine's."""
    prompts = {str(i): PROMPT + [11, 12] + [30 + i] * (1 + 2 * i) for i in range(4)}  # all share 0's 12
    engine, kv, runner = make_engine(num_blocks=14, block_size=2, budget=5)
    for rid, p in prompts.items():
        engine.add_request(p, SamplingParams(max_tokens=8, temperature=0, ignore_eos=True), rid)
    outs = finish(engine)
    assert engine.scheduler.num_preemptions > 0
    assert any(s.state_restore >= 0 for so in runner.steps for s in so.seqs)
    assert outs == {rid: without_cache(p, 8) for rid, p in prompts.items()}


def test_the_checks_fail_when_a_hit_skips_its_restore():
    engine, kv, runner = make_engine()
    run(engine, PROMPT, "a")
    runner.skip_restore = True
    assert run(engine, PROMPT + [20, 21], "b") != without_cache(PROMPT + [20, 21])


def test_a_long_answer_s_snapshots_take_its_own_slot_not_another_conversation_s():
    """Each full block of an answer replaces that answer's snapshot: its own slot is freed first, so a finished
    conversation's snapshots survive another's long answer in a pool that holds both (a reviewer's resend got 0
    cached tokens: every block of the other answer evicted one)."""
    engine, kv, runner = make_engine(snapshots=3)
    run(engine, PROMPT, "a", n=2)  # held: its prompt's block 8 (its answer fills no block)
    run(engine, [30 + i for i in range(10)], "b", n=40)  # its prompt's block 8, then its answer's latest block
    assert kv.snapshots.evictions == 0
    engine.add_request(PROMPT, SamplingParams(max_tokens=2, temperature=0, ignore_eos=True), "a2")
    resend = engine.scheduler.waiting[-1]
    assert finish(engine)["a2"] == without_cache(PROMPT, n=2) and resend.num_cached_tokens == 8


def test_the_index_evicts_least_recently_used_and_skips_what_it_holds():
    idx = SnapshotIndex(2)
    assert [idx.reserve(b"a"), idx.reserve(b"b"), idx.reserve(b"a")] == [0, 1, -1]  # a is being saved already
    idx.written([0, 1])
    assert idx.reserve(b"a") == -1 and idx.take(b"a") == 0  # a used: b is the least recently used
    assert idx.reserve(b"c") == 1 and not idx.has(b"b") and idx.evictions == 1
    idx.written([])  # c's save not made: its slot comes back empty
    assert not idx.has(b"c") and idx.free == [1]
    assert SnapshotIndex(0).reserve(b"a") == -1


def test_a_chunk_is_not_cut_inside_a_bidirectional_image_span():
    from hearth.engine.request import Request
    from hearth.media.inputs import MediaInput

    kv = KVCacheManager(64, 4, state_slots=2, state_snapshots=2)
    plain = Request("a", PROMPT, SamplingParams(), frozenset(), 256)
    assert [kv.snapshot_chunk(plain, start, n) for start, n in ((0, 16), (0, 5), (8, 2))] == [8, 5, 2]
    for bidirectional, want in ((True, 16), (False, 8)):  # rows 6..9 cross the boundary at 8
        image = MediaInput(offset=6, length=4, digest=b"x", pixels=None, bidirectional=bidirectional)
        req = Request("b", PROMPT, SamplingParams(), frozenset(), 256, media=[image])
        assert kv.snapshot_chunk(req, 0, 16) == want
