"""The recurrent state slots of a model with recurrent layers (hearth.engine.kv_cache_manager, state_slots): one
per running request, handed out with its first blocks, carried by each ScheduledSequence, taken back with its
blocks on finish, abort and preemption; exact slot ids, model-free (tests/engine/fakes.py)."""

from hearth.engine.engine_core import EngineCore
from hearth.engine.kv_cache_manager import KVCacheManager
from hearth.engine.scheduler import Scheduler
from hearth.sampling_params import SamplingParams

from tests.engine.fakes import CountingRunner, LetterTokenizer


def make_engine(num_blocks=64, block_size=4, max_seqs=3, budget=16):
    kv = KVCacheManager(num_blocks, block_size, enable_prefix_caching=False, state_slots=max_seqs)
    sched = Scheduler(kv, max_seqs, budget)
    runner = CountingRunner()
    return EngineCore(sched, runner, LetterTokenizer(), 256, 50), sched, runner


def run_all(engine):
    while engine.has_unfinished():
        engine.step()


def slots(so) -> dict[str, int]:
    return {s.request_id: s.state_slot for s in so.seqs}


def test_each_running_request_holds_its_own_slot_until_it_ends():
    engine, sched, runner = make_engine()
    for i, n in enumerate((2, 5, 3)):
        engine.add_request([1 + i] * 3, SamplingParams(max_tokens=n, temperature=0), str(i))
    engine.step()
    assert slots(runner.steps[-1]) == {"0": 0, "1": 1, "2": 2}
    run_all(engine)
    for so in runner.steps:  # the same slot every step, never shared
        assert len(set(slots(so).values())) == len(so.seqs)
        assert all(slots(so)[r] == int(r) for r in slots(so))
    assert sorted(sched.kv.free_states) == [0, 1, 2]


def test_a_finished_requests_slot_goes_to_the_next_admission_which_starts_at_position_0():
    engine, sched, runner = make_engine(max_seqs=2)
    engine.add_request([1, 2], SamplingParams(max_tokens=1, temperature=0), "a")
    engine.add_request([3, 4], SamplingParams(max_tokens=6, temperature=0), "b")
    engine.add_request([5, 6], SamplingParams(max_tokens=2, temperature=0), "c")  # waits for a slot
    run_all(engine)
    first_c = next(s for so in runner.steps for s in so.seqs if s.request_id == "c")
    assert (first_c.state_slot, first_c.start_pos) == (0, 0)  # a's, freed when it finished
    assert sorted(sched.kv.free_states) == [0, 1]


def test_abort_and_preemption_give_the_slot_back():
    engine, sched, _ = make_engine()
    engine.add_request([1, 2, 3], SamplingParams(max_tokens=50, temperature=0), "x")
    engine.step()
    assert sched.kv.free_states == [2, 1]
    engine.abort("x")
    assert sorted(sched.kv.free_states) == [0, 1, 2]
    # 6 blocks of 2 tokens cannot hold three sequences of 3 + 8 tokens: the newest are preempted
    engine, sched, runner = make_engine(num_blocks=6, block_size=2)
    for i in range(3):
        engine.add_request([1 + i, 2 + i, 3 + i], SamplingParams(max_tokens=8, temperature=0), str(i))
    run_all(engine)
    assert sched.num_preemptions > 0 and sorted(sched.kv.free_states) == [0, 1, 2]
    held: dict[int, str] = {}
    for so in runner.steps:  # a slot in use by one request at a time; a recompute starts at position 0
        for s in so.seqs:
            if held.get(s.state_slot) != s.request_id:
                assert s.start_pos == 0
                held[s.state_slot] = s.request_id


def test_a_model_with_state_slots_and_no_snapshots_gets_no_prefix_cache_hit():
    """Its hits end on a held state snapshot (tests/engine/test_state_snapshots.py): with none, there is none."""
    engine, sched, runner = make_engine()
    sched.kv = kv = KVCacheManager(64, 4, state_slots=3)
    assert kv.snapshots.capacity == 0
    for rid in "ab":
        engine.add_request(list(range(1, 11)), SamplingParams(max_tokens=2, temperature=0), rid)
        run_all(engine)
    assert [s.start_pos for so in runner.steps for s in so.seqs if s.request_id == "b"][0] == 0
    assert all(s.state_snapshot == -1 for so in runner.steps for s in so.seqs)


def test_a_model_without_recurrent_layers_gets_no_slot():
    engine, sched, runner = make_engine()
    sched.kv.needs_state = False
    engine.add_request([1, 2], SamplingParams(max_tokens=2, temperature=0), "a")
    run_all(engine)
    assert all(s.state_slot == -1 for so in runner.steps for s in so.seqs)
