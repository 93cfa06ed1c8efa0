"""A prefix another request is computing is not computed twice: the second request waits for those
blocks and takes them from the prefix cache (exact block ids and positions, CountingRunner)."""

from hearth.engine.engine_core import EngineCore
from hearth.engine.kv_cache_manager import KVCacheManager
from hearth.engine.scheduler import Scheduler
from hearth.sampling_params import SamplingParams

from tests.engine.fakes import CountingRunner, LetterTokenizer
from tests.engine.test_scheduler import make_engine, run_all


def greedy(n=3):
    return SamplingParams(max_tokens=n, temperature=0)


def seqs(runner, step):
    """{request id: (start_pos, number of tokens)} of one step (idle prefault steps skipped)."""
    steps = [so for so in runner.steps if so.seqs]
    return {s.request_id: (s.start_pos, len(s.token_ids)) for s in steps[step].seqs}


def test_two_requests_arriving_together_compute_their_shared_blocks_once():
    engine, sched, runner = make_engine(block_size=4, budget=64)
    prompt = list(range(1, 10))  # two full blocks + 1 token
    engine.add_request(prompt, greedy(), "a")
    engine.add_request(prompt, greedy(), "b")
    outs = run_all(engine)
    assert seqs(runner, 0) == {"a": (0, 9)}  # b would compute the same two blocks: it waits
    assert seqs(runner, 1) == {"a": (9, 1), "b": (8, 1)}  # then reads them from the cache
    steps = [so for so in runner.steps if so.seqs]
    a_blocks, b_blocks = steps[0].seqs[0].block_ids, steps[1].seqs[1].block_ids
    assert a_blocks == [0, 1, 2] and b_blocks == [0, 1, 3]
    assert sched.kv.stats.queries == 18 and sched.kv.stats.hits == 8
    assert [t for o in outs["b"] for t in o.new_token_ids] == [t for o in outs["a"] for t in o.new_token_ids]
    assert outs["b"][-1].num_cached_tokens == 8
    assert sched.kv.pool.num_free == 64


def test_a_request_waits_for_the_chunks_a_running_prefill_has_left_while_others_go_on():
    engine, sched, runner = make_engine(block_size=4, budget=8)
    shared = list(range(1, 21))  # five full blocks, prefilled 8 tokens a step
    engine.add_request(shared, greedy(2), "a")
    engine.step()
    assert seqs(runner, 0) == {"a": (0, 8)}
    engine.add_request(shared + [30, 31, 32], greedy(2), "b")
    engine.add_request([40, 41, 42], greedy(2), "c")  # shares nothing: not held up behind b
    engine.step()
    assert seqs(runner, 1) == {"a": (8, 8)}  # c does not fit the budget left
    engine.step()
    assert seqs(runner, 2) == {"a": (16, 4), "c": (0, 3)}  # b: blocks 0-3 cached, block 4 is a's
    engine.step()
    assert seqs(runner, 3) == {"a": (20, 1), "c": (3, 1), "b": (20, 3)}  # b computes only its own 3
    run_all(engine)
    computed_by_b = sum(n for step in range(sum(1 for so in runner.steps if so.seqs)) for rid, (_, n) in seqs(runner, step).items()
                        if rid == "b")
    assert computed_by_b == 3 + 1  # its three prompt tokens, then one decode
    assert sched.kv.stats.hits == 20


def test_requests_sharing_less_than_a_block_are_admitted_together():
    engine, _, runner = make_engine(block_size=4, budget=64)
    engine.add_request([1, 2, 3, 4, 5], greedy(), "a")
    engine.add_request([1, 2, 3, 9, 9], greedy(), "b")
    run_all(engine)
    assert seqs(runner, 0) == {"a": (0, 5), "b": (0, 5)}


def test_without_prefix_caching_nobody_waits():
    sched = Scheduler(KVCacheManager(64, 4, enable_prefix_caching=False), 8, 64)
    runner = CountingRunner()
    engine = EngineCore(sched, runner, LetterTokenizer(), 256, 50)
    prompt = list(range(1, 10))
    engine.add_request(prompt, greedy(), "a")
    engine.add_request(prompt, greedy(), "b")
    run_all(engine)
    assert seqs(runner, 0) == {"a": (0, 9), "b": (0, 9)}


def test_a_waiter_goes_on_when_the_request_computing_its_prefix_is_aborted():
    engine, sched, runner = make_engine(block_size=4, budget=8)
    shared = list(range(1, 21))  # five full blocks, prefilled 8 tokens a step
    engine.add_request(shared, greedy(2), "a")
    engine.add_request(shared, greedy(2), "b")
    engine.step()
    assert seqs(runner, 0) == {"a": (0, 8)}  # b waits for a's blocks
    engine.abort("a")  # a's uncomputed blocks will never come: b must not wait for them
    engine.step()
    assert seqs(runner, 1) == {"b": (8, 8)}  # a's two computed blocks are b's cache hit
    run_all(engine)
    assert sched.kv.pool.num_free == 64 and not sched.waiting and not sched.running
