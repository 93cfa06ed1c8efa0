import pytest

from hearth.engine.block_pool import BlockPool
from hearth.engine.engine_core import EngineCore
from hearth.engine.kv_cache_manager import KVCacheManager
from hearth.engine.scheduler import Scheduler
from hearth.sampling_params import SamplingParams

from tests.engine.fakes import CountingRunner, LetterTokenizer


def make_engine(num_blocks=64, block_size=4, max_seqs=8, budget=16, max_len=256):
    sched = Scheduler(KVCacheManager(num_blocks, block_size), max_seqs, budget)
    runner = CountingRunner()
    return EngineCore(sched, runner, LetterTokenizer(), max_len, 50), sched, runner


def run_all(engine):
    outs = {}
    while engine.has_unfinished():
        for o in engine.step():
            outs.setdefault(o.request_id, []).append(o)
    return outs


def test_long_prompt_is_chunked_and_decodes_keep_running():
    engine, _, runner = make_engine(budget=8)
    engine.add_request([1, 2, 3], SamplingParams(max_tokens=6, temperature=0), "short")
    engine.step()  # short prompt prefilled; first token sampled
    engine.add_request(list(range(1, 21)), SamplingParams(max_tokens=2, temperature=0), "long")
    run_all(engine)
    assert all(so.num_tokens <= 8 for so in runner.steps)
    chunk_steps = [so for so in runner.steps if any(s.request_id == "long" and not s.sample for s in so.seqs)]
    assert len(chunk_steps) == 2  # 20 prompt tokens, 7 per step beside the decode: 7 + 7 + 6
    for so in chunk_steps:  # the running decode was never stalled by the long prompt
        assert [s.request_id for s in so.seqs] == ["short", "long"]


def test_counting_output_and_stop_reasons():
    engine, sched, _ = make_engine()
    engine.add_request([5], SamplingParams(max_tokens=3, temperature=0), "a")
    engine.add_request([47], SamplingParams(max_tokens=10, temperature=0), "b")  # 48, 49, 0=eos
    outs = run_all(engine)
    tokens = {k: sum((o.new_token_ids for o in v), []) for k, v in outs.items()}
    assert tokens == {"a": [6, 7, 8], "b": [48, 49, 0]}
    assert outs["a"][-1].finish_reason == "length" and outs["b"][-1].finish_reason == "stop"
    assert sched.kv.pool.num_free == 64


def test_stop_string_is_cut_and_held_back():
    engine, _, _ = make_engine()
    # tokens 2,3,4,5 -> "cdef"; stop at "de"
    engine.add_request([1], SamplingParams(max_tokens=10, temperature=0, stop=["de"]), "s")
    outs = run_all(engine)["s"]
    assert "".join(o.new_text for o in outs) == "c"
    assert outs[-1].finish_reason == "stop" and outs[-1].stop_reason == "de"


def test_preemption_recomputes_and_matches_uninterrupted():
    def tokens(num_blocks):
        engine, sched, _ = make_engine(num_blocks=num_blocks, block_size=2)
        for i in range(3):
            engine.add_request([1 + i, 2 + i, 3 + i], SamplingParams(max_tokens=8, temperature=0), str(i))
        outs = run_all(engine)
        assert sched.kv.pool.num_free == num_blocks
        return {k: sum((o.new_token_ids for o in v), []) for k, v in outs.items()}

    assert tokens(num_blocks=8) == tokens(num_blocks=64)


def test_abort_returns_every_block():
    engine, sched, _ = make_engine()
    engine.add_request(list(range(1, 10)), SamplingParams(max_tokens=50, temperature=0), "x")
    engine.step()
    assert sched.kv.pool.num_free < 64
    engine.abort("x")
    assert sched.kv.pool.num_free == 64 and not engine.has_unfinished()


def test_token_slice_spans_prompt_and_output():
    from hearth.engine.request import Request

    req = Request("r", [1, 2, 3], SamplingParams(), frozenset(), 100)
    req.output_token_ids = [4, 5]
    for start in range(5):
        for n in range(1, 6 - start):
            assert req.token_slice(start, n) == req.all_token_ids[start : start + n]


def test_an_idle_engine_names_the_blocks_a_full_step_takes_next():
    engine, _, runner = make_engine(num_blocks=64, block_size=4, budget=16)
    assert not runner.steps[0].seqs and runner.steps[0].prefault_blocks == range(0, 4)  # right after start
    engine.add_request(list(range(1, 10)), SamplingParams(max_tokens=3, temperature=0), "a")
    run_all(engine)  # 9 + 2 tokens written: blocks 0-2, kept for the prefix cache
    idle = [so for so in runner.steps if so.prefault_blocks]
    assert len(idle) == 2 and not idle[1].seqs and idle[1].prefault_blocks == range(3, 7)
    assert runner.steps[-1] is idle[1]


def test_no_blocks_to_prefault_once_every_block_was_used():
    engine, _, runner = make_engine(num_blocks=3, block_size=4, budget=16)
    engine.add_request(list(range(1, 10)), SamplingParams(max_tokens=3, temperature=0), "a")
    run_all(engine)
    assert not any(so.prefault_blocks for so in runner.steps[1:])  # [0]: at start
    assert not runner.steps[-1].seqs and runner.steps[-1].finished_request_ids == ["a"]  # idle: a's state goes
    n = len(runner.steps)
    engine.abort("a")  # ended already: nothing to tell the runner, no message
    assert len(runner.steps) == n


def fail(message):
    def raising(*args):
        raise RuntimeError(message)
    return raising


def test_ended_requests_reach_the_runner_after_a_failed_step():
    """A step that fails (its runner, or the scheduler building its message) must not lose the ids of
    the requests that ended before it, nor of those it ends: the runner drops their state later."""
    engine, sched, runner = make_engine()
    for rid in ("a", "b", "c"):
        engine.add_request([1, 2], SamplingParams(max_tokens=10, temperature=0), rid)
    engine.step()
    engine.abort("a")
    real = sched._message
    sched._message = fail("message")  # after the finished ids used to be taken
    with pytest.raises(RuntimeError, match="message"):
        engine.step()
    sched._message = real
    assert engine.failed_step() is None  # not the runner's: every request is in doubt
    engine.abort("b")
    real_execute = runner.execute
    runner.execute = lambda so: (runner.steps.append(so), fail("runner")())  # gets the ids, then fails
    with pytest.raises(RuntimeError, match="runner"):
        engine.step()
    runner.execute = real_execute
    assert engine.failed_step() == ["c"] and runner.steps[-1].finished_request_ids == ["a", "b"]
    engine.abort("c")  # the last one: the engine is idle, the runner told at once
    assert not runner.steps[-1].seqs and runner.steps[-1].finished_request_ids == ["c"]
    sent = [rid for so in runner.steps for rid in so.finished_request_ids]
    assert sent == ["a", "b", "c"]
