"""AsyncEngine: streams of deltas from a background thread, abort, backpressure, step failures."""

import asyncio
import threading

import pytest

from hearth.engine.async_engine import AsyncEngine, EngineFullError, EngineShutdownError, EngineStepError, RequestStream
from hearth.engine.engine_core import InvalidPromptError
from hearth.sampling_params import SamplingParams

from tests.engine.test_scheduler import make_engine


def greedy(n):
    return SamplingParams(max_tokens=n, temperature=0)


async def collect(stream):
    async with stream:
        return [out async for out in stream]


def run(coro_fn, engine):
    """Start an AsyncEngine over `engine`, run coro_fn(async_engine), always shut down."""
    ae = AsyncEngine(engine, max_queued=2)
    ae.start()
    try:
        return asyncio.run(coro_fn(ae))
    finally:
        ae.shutdown()


def test_concurrent_streams_get_their_own_tokens():
    engine, sched, _ = make_engine()

    async def main(ae):
        streams = [ae.add_request([i], greedy(4)) for i in (1, 10, 20)]
        return await asyncio.gather(*(collect(s) for s in streams))

    results = run(main, engine)
    assert [sum((o.new_token_ids for o in outs), []) for outs in results] == [
        [2, 3, 4, 5], [11, 12, 13, 14], [21, 22, 23, 24]]
    assert all(outs[-1].finished and outs[-1].finish_reason == "length" for outs in results)
    assert sched.kv.pool.num_free == 64


def test_leaving_the_stream_early_aborts_and_frees_blocks():
    engine, sched, _ = make_engine()

    async def main(ae):
        async with ae.add_request(list(range(1, 10)), greedy(None)) as stream:
            async for out in stream:
                if len(out.new_token_ids) and sched.kv.pool.num_free < 64:
                    break
        for _ in range(100):  # the abort lands on the engine thread within a step
            if sched.kv.pool.num_free == 64 and not engine.has_unfinished():
                return True
            await asyncio.sleep(0.01)
        return False

    assert run(main, engine)


def test_bad_prompt_and_full_queue_raise_before_any_output():
    engine, _, _ = make_engine(max_seqs=1)

    async def main(ae):
        with pytest.raises(InvalidPromptError):
            ae.add_request([], greedy(1))
        streams = [ae.add_request([1], greedy(3)) for _ in range(3)]  # 1 seq + 2 queued
        with pytest.raises(EngineFullError, match="limit 3"):
            ae.add_request([1], greedy(3))
        await asyncio.gather(*(collect(s) for s in streams))
        ae.add_request([1], greedy(1)).abort()  # room again once they finished

    run(main, engine)


def test_a_request_added_to_a_stopped_engine_is_refused_not_left_waiting():
    """A model unloaded between the pool's get() and add_request: a clean error (the API's 503), never a
    stream its loop will not answer."""
    engine, _, _ = make_engine()
    ae = AsyncEngine(engine)
    ae.start()
    ae.shutdown()
    with pytest.raises(EngineShutdownError, match="unloaded"):
        ae.add_request([1], greedy(1))


def _frames(tb) -> int:
    n = 0
    while tb is not None:
        n, tb = n + 1, tb.tb_next
    return n


def test_end_streams_ends_every_request_in_flight_with_its_error_and_refuses_new_ones():
    """A server's shutdown: the answers end now with the error (their clients see it), blocks free."""
    engine, sched, runner = make_engine()
    real, gate, calls = runner.execute, threading.Event(), []

    def gated(so):  # the second step waits until shutdown has begun: the requests are still running then
        calls.append(so)
        if len(calls) > 1:
            gate.wait(10)
        return real(so)

    runner.execute = gated

    async def main(ae):
        streams = [ae.add_request([i], greedy(None)) for i in (1, 10)]  # as long as the context lets them
        async with streams[0]:
            await streams[0].__anext__()  # running
            ae.end_streams(EngineShutdownError("the server is shutting down"))
            gate.set()
            with pytest.raises(EngineShutdownError, match="shutting down") as first:
                async for _ in streams[0]:
                    pass
        with pytest.raises(EngineShutdownError) as second:
            await collect(streams[1])
        refused = []
        for _ in range(2):
            with pytest.raises(EngineShutdownError, match="shutting down") as e:
                ae.add_request([1], greedy(1))
            refused.append(e.value)
        # a fresh error each time: one shared instance grew its traceback with every raise
        assert len({id(x) for x in (first.value, second.value, *refused)}) == 4
        assert all(_frames(x.__traceback__) <= 2 for x in refused)
        for _ in range(100):
            if sched.kv.pool.num_free == 64 and not engine.has_unfinished():
                return True
            await asyncio.sleep(0.01)
        return False

    assert run(main, engine)


def test_a_failing_step_ends_requests_with_an_error_and_the_engine_goes_on():
    engine, sched, runner = make_engine()
    real = runner.execute
    calls = {"n": 0}

    def flaky(so):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("boom")
        return real(so)

    runner.execute = flaky

    async def main(ae):
        with pytest.raises(EngineStepError, match="RuntimeError: boom"):
            await collect(ae.add_request([1], greedy(5)))
        return await collect(ae.add_request([1], greedy(2)))

    outs = run(main, engine)
    assert sum((o.new_token_ids for o in outs), []) == [2, 3]
    assert sched.kv.pool.num_free == 64


def test_a_runner_failure_ends_only_the_requests_of_its_step():
    """One sequence's kernel error fails the step it ran in: a request still waiting (max_num_seqs 1)
    is not in doubt and is answered as if nothing happened."""
    engine, sched, runner = make_engine(max_seqs=1)
    real, calls = runner.execute, {"n": 0}

    def flaky(so):
        calls["n"] += 1
        if calls["n"] == 2:
            assert [s.request_id for s in so.seqs] == ["a"]  # b waits for the one slot
            raise RuntimeError("kernel error")
        return real(so)

    runner.execute = flaky

    async def main(ae):
        a, b = ae.add_request([1], greedy(5), "a"), ae.add_request([10], greedy(3), "b")
        failed, answered = await asyncio.gather(collect(a), collect(b), return_exceptions=True)
        return failed, answered

    failed, answered = run(main, engine)
    assert isinstance(failed, EngineStepError) and "RuntimeError: kernel error" in str(failed)
    assert sum((o.new_token_ids for o in answered), []) == [11, 12, 13] and answered[-1].finished
    assert sched.kv.pool.num_free == 64


def test_a_failed_step_leaves_the_runner_no_state_of_its_requests():
    """The runner keeps per-request state (ModelRunner: generators, grammar matchers, staging slots)
    until a message names the request as finished: a failed step's requests are named at once."""
    engine, sched, runner = make_engine()
    real, held, calls = runner.execute, set(), {"n": 0}

    def tracking(so):  # as ModelRunner: drop the ended ones first, then hold the scheduled ones
        held.difference_update(so.finished_request_ids)
        held.update(s.request_id for s in so.seqs)
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("kernel error")
        return real(so)

    runner.execute = tracking

    async def main(ae):
        with pytest.raises(EngineStepError, match="kernel error"):
            await collect(ae.add_request([1], greedy(5), "a"))
        return set(held)

    assert run(main, engine) == set() and calls["n"] == 4  # prefill, decode, the failed one, the idle one
    assert sched.kv.pool.num_free == 64


def test_a_failure_outside_the_runner_ends_every_request_in_flight_and_the_engine_goes_on():
    engine, sched, _ = make_engine(max_seqs=1)
    real, calls = sched.update, {"n": 0}

    def flaky(so, result):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("bookkeeping")
        return real(so, result)

    sched.update = flaky

    async def main(ae):
        streams = [ae.add_request([1], greedy(5)), ae.add_request([10], greedy(3))]
        failed = await asyncio.gather(*(collect(s) for s in streams), return_exceptions=True)
        return failed, await collect(ae.add_request([20], greedy(2)))

    failed, outs = run(main, engine)
    assert all(isinstance(f, EngineStepError) and "bookkeeping" in str(f) for f in failed)
    assert sum((o.new_token_ids for o in outs), []) == [21, 22]


def test_the_engine_thread_outlives_a_failing_command():
    """Were the engine thread to die, every request after it would wait forever."""
    engine, _, _ = make_engine()
    real = engine.abort

    def abort_once(rid):
        engine.abort = real
        raise RuntimeError("abort")

    engine.abort = abort_once

    async def main(ae):
        ae.add_request([1], greedy(None)).abort()  # its abort command raises on the engine thread
        return await asyncio.wait_for(collect(ae.add_request([20], greedy(2))), timeout=10)

    outs = run(main, engine)
    assert sum((o.new_token_ids for o in outs), []) == [21, 22]


def test_requests_in_flight_are_counted_and_thread_init_runs_on_the_engine_thread():
    import threading

    engine, _, _ = make_engine()
    ran_on = []
    ae = AsyncEngine(engine, thread_init=lambda: ran_on.append(threading.current_thread().name))
    ae.start()

    async def main():
        assert ae.num_in_flight == 0
        a, b = ae.add_request([1], greedy(3)), ae.add_request([2], greedy(None))
        assert ae.num_in_flight == 2
        await collect(a)
        assert ae.num_in_flight == 1  # finished: no longer counted
        b.abort()
        return ae.num_in_flight

    try:
        assert asyncio.run(main()) == 0
    finally:
        ae.shutdown()
    assert ran_on == ["hearth-engine"]


def test_output_for_a_reader_whose_loop_has_closed_is_dropped():
    # the engine thread may still hold a step's output for a stream whose event loop has just ended
    engine, _, _ = make_engine()
    ae = AsyncEngine(engine)

    async def open_stream():
        return RequestStream(ae, "gone")

    stream = asyncio.run(open_stream())
    stream._put(RuntimeError("late"))  # dropped: raising would end the engine thread
