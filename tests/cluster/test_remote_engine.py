"""ClusterEngine and RemoteStream over fake replica handles (no Ray instance): a replica lost before
the first delta is retried once elsewhere, one lost mid-answer ends the stream with EngineStepError,
a replica's own error comes back as the engine's class, bad prompts fail before routing, the load
counts return to zero on every path, and stats sum over replicas."""

from __future__ import annotations

import asyncio

import pytest
import ray

from hearth.cluster.remote_engine import ClusterEngine, ReplicaSlot
from hearth.cluster.replica import ReplicaError, ReplicaInfo
from hearth.cluster.router import make_router
from hearth.cluster.scaling import Scaler
from hearth.engine.async_engine import EngineFullError, EngineShutdownError, EngineStats, EngineStepError
from hearth.errors import PromptTooLongError
from hearth.outputs import EngineOutput
from hearth.sampling_params import InvalidSamplingParams, SamplingParams

DIED = ray.exceptions.ActorDiedError
HANG = object()


def out(text: str, finished: bool = False) -> EngineOutput:
    return EngineOutput("r", [1], text, finished, "length" if finished else None)


class FakeCall:
    """A Ray streaming generator over a script: values are deltas, exceptions are raised."""

    def __init__(self, script: list):
        self.script = list(script)

    def __aiter__(self):
        return self

    async def __anext__(self):
        if not self.script:
            raise StopAsyncIteration
        item = self.script.pop(0)
        if item is HANG:  # the replica's next delta is far off (a long step, a busy replica)
            await asyncio.Event().wait()
        if isinstance(item, BaseException):
            raise item
        ref = asyncio.get_running_loop().create_future()  # an ObjectRef is awaited for the value
        ref.set_result(item)
        return ref


class FakeHandle:
    """Actor handle: generate.options(...).remote(...) starts the next scripted call."""

    def __init__(self, *scripts: list):
        self.scripts, self.calls = list(scripts), []
        self.generate = self

    def options(self, **kw):
        return self

    def remote(self, ids, params, request_id):
        call = FakeCall(self.scripts.pop(0))
        self.calls.append(call)
        return call


def cluster(*handles: FakeHandle, routing: str = "round-robin", model_context: int = 64) -> ClusterEngine:
    info = ReplicaInfo(64, 100, model_context, 16, b"r" * 16, 4, 1, "host")
    return ClusterEngine([ReplicaSlot(f"r{i}", h, info) for i, h in enumerate(handles)],
                         make_router(routing, len(handles)))


async def drain(stream) -> list[str]:
    return [o.new_text async for o in stream]


def test_a_replica_lost_before_the_first_delta_is_retried_on_another():
    a = FakeHandle([DIED()])
    b = FakeHandle([out("he"), out("llo", True)])
    engine = cluster(a, b)
    assert asyncio.run(drain(engine.add_request([1, 2], SamplingParams()))) == ["he", "llo"]
    assert [s.up for s in engine.slots] == [False, True]  # r0 waits for the health loop to see it back
    assert [(s.in_flight, s.answering, s.routed) for s in engine.slots] == [(0, 0, 1), (0, 0, 1)]


def test_a_replica_lost_mid_answer_ends_the_stream_with_an_error():
    engine = cluster(FakeHandle([out("he"), DIED()]), FakeHandle())
    seen = []

    async def run():
        async for o in engine.add_request([1, 2], SamplingParams()):
            seen.append(o.new_text)

    with pytest.raises(EngineStepError, match="replica r0 died mid-answer"):
        asyncio.run(run())
    assert seen == ["he"] and engine.slots[0].in_flight == engine.slots[0].answering == 0


def test_retried_once_only():
    engine = cluster(FakeHandle([ray.exceptions.ActorUnavailableError("gone", None)]), FakeHandle([DIED()]))
    with pytest.raises(EngineStepError, match="died twice before answering"):
        asyncio.run(drain(engine.add_request([1], SamplingParams())))
    assert all(s.in_flight == 0 and not s.up for s in engine.slots)


def test_a_stream_that_ends_unfinished_is_an_error_not_a_hang():
    engine = cluster(FakeHandle([out("he")]))
    with pytest.raises(EngineStepError, match="without finishing"):
        asyncio.run(drain(engine.add_request([1], SamplingParams())))


def test_a_replicas_error_comes_back_as_the_engines_class():
    engine = cluster(FakeHandle([ReplicaError.of(EngineFullError("9 requests in flight"))]))
    with pytest.raises(EngineFullError, match="9 requests in flight"):
        asyncio.run(drain(engine.add_request([1], SamplingParams())))


def test_bad_prompts_fail_before_routing_and_no_replica_up_is_a_429():
    engine = cluster(FakeHandle(), FakeHandle())
    with pytest.raises(PromptTooLongError) as e:
        engine.add_request(list(range(64)), SamplingParams())
    assert str(e.value).endswith("; shorten the prompt")  # 64 is the model's own: no --max-model-len to raise
    with pytest.raises(PromptTooLongError, match=r"raise --max-model-len \(the model's own context is 128\)"):
        cluster(FakeHandle(), model_context=128).add_request(list(range(64)), SamplingParams())
    assert sum(s.routed for s in engine.slots) == 0
    for s in engine.slots:
        s.up = False
    with pytest.raises(EngineFullError, match="no replica is up"):
        engine.add_request([1], SamplingParams())


def test_the_replicas_max_logprobs_is_checked_before_routing():
    """The front end holds no engine: the cap it checks is the replicas' EngineConfig.max_logprobs."""
    info = ReplicaInfo(64, 100, 64, 16, b"r" * 16, 4, 1, "host", max_logprobs=5)
    engine = ClusterEngine([ReplicaSlot("r0", FakeHandle(), info)], make_router("round-robin", 1))
    with pytest.raises(InvalidSamplingParams, match=r"^logprobs must be at most 5 \(max_logprobs\), got 6$"):
        engine.add_request([1], SamplingParams(logprobs=6))
    assert engine.slots[0].routed == 0


def test_abort_cancels_the_replicas_call(monkeypatch):
    cancelled = []
    monkeypatch.setattr(ray, "cancel", cancelled.append)
    handle = FakeHandle([out("he"), out("llo", True)])
    engine = cluster(handle)

    async def first_then_leave():
        async with engine.add_request([1], SamplingParams()) as stream:
            await stream.__anext__()

    asyncio.run(first_then_leave())
    assert cancelled == handle.calls and engine.slots[0].in_flight == 0


def test_a_shutdown_ends_open_streams_at_once_and_refuses_new_requests(monkeypatch):
    """end_streams (Ctrl-C): a stream waiting on its replica raises EngineShutdownError now, one
    not yet read raises it on its first read, the replicas' calls are cancelled and the load counts
    return to zero; a new request is refused with the same error (the server's 503)."""
    cancelled = []
    monkeypatch.setattr(ray, "cancel", cancelled.append)
    handle = FakeHandle([out("he"), HANG], [HANG])
    engine = cluster(handle)

    async def main():
        waiting, unread = engine.add_request([1], SamplingParams()), engine.add_request([2], SamplingParams())
        assert (await waiting.__anext__()).new_text == "he"
        pending = asyncio.ensure_future(waiting.__anext__())
        await asyncio.sleep(0.01)
        assert not pending.done()  # the replica has not answered
        engine.end_streams(EngineShutdownError("the server is shutting down"))
        for stream in (pending, unread.__anext__()):
            with pytest.raises(EngineShutdownError, match="shutting down"):
                await asyncio.wait_for(stream, 1)
        with pytest.raises(StopAsyncIteration):
            await waiting.__anext__()
        with pytest.raises(EngineShutdownError, match="shutting down"):
            engine.add_request([3], SamplingParams())

    asyncio.run(main())
    assert cancelled == handle.calls and engine.slots[0].in_flight == 0 and not engine._open


def test_stats_sum_over_replicas_and_stay_per_replica():
    engine = cluster(FakeHandle(), FakeHandle())
    engine.slots[0].stats = EngineStats(1, 2, 3, 10, 100, 40)
    engine.slots[1].stats = EngineStats(0, 1, 5, 10, 50, 10)
    total = engine.stats()
    assert (total.num_running, total.num_waiting, total.kv_blocks_used, total.kv_blocks_total,
            total.prefix_cache_queries, total.prefix_cache_hits) == (1, 3, 8, 20, 150, 50)
    assert engine.replica_stats() == {"r0": engine.slots[0].stats, "r1": engine.slots[1].stats}


def test_scaling_down_drains_before_the_replica_is_killed():
    handle = FakeHandle([out("he"), out("llo", True)])
    engine = cluster(FakeHandle(), handle)
    killed = []
    scaler = Scaler(engine, spawn=None, router_for=lambda n: make_router("round-robin", n), kill=killed.append,
                    drain_poll_s=0.001)
    engine.slots[0].up = False  # the request goes to r1, the one scaled away

    async def run():
        stream = engine.add_request([1], SamplingParams())
        assert stream.slot is engine.slots[1]
        scaling = asyncio.create_task(scaler.scale_to(1))
        await asyncio.sleep(0.01)
        assert not scaling.done() and engine.slots[1].draining  # waits for the request in flight
        texts = await drain(stream)
        return texts, await scaling

    assert asyncio.run(run()) == (["he", "llo"], ["r0"])
    assert killed == [handle] and engine.router.num_replicas == 1


def test_scaling_up_adds_loaded_replicas_under_new_names():
    engine = cluster(FakeHandle())
    info = engine.slots[0].info
    scaler = Scaler(engine, spawn=lambda k: [(FakeHandle(), info) for _ in range(k)],
                    router_for=lambda n: make_router("round-robin", n), kill=None)
    assert asyncio.run(scaler.scale_to(3)) == ["r0", "r1", "r2"] and engine.router.num_replicas == 3


def test_props_sums_the_replicas_slots_and_says_whether_they_speculate(tmp_path):
    """GET /props under `hearth cluster serve` read total_slots 1 and speculative false whatever the
    replicas ran: now what they reported as they loaded (no Ray call a request), recounted after scaling."""
    from dataclasses import replace

    from fastapi.testclient import TestClient

    from hearth.api.app import ServerConfig
    from hearth.commands.cluster import build_app
    from tests.gguf_factory import write_tiny_gguf

    write_tiny_gguf(tmp_path / "m.gguf", "llama")
    info = replace(ReplicaInfo(64, 100, 64, 16, b"r" * 16, 4, 1, "host"), max_num_seqs=3, speculative=True)
    engine = ClusterEngine([ReplicaSlot(f"r{i}", FakeHandle(), info) for i in range(2)], make_router("round-robin", 2))
    scaler = Scaler(engine, spawn=lambda k: [(FakeHandle(), info) for _ in range(k)],
                    router_for=lambda n: make_router("round-robin", n), kill=lambda handle: None)
    client = TestClient(build_app(str(tmp_path / "m.gguf"), ["m"], engine, ServerConfig(), scaler))

    def props() -> tuple[int, bool]:
        body = client.get("/props").json()
        return body["total_slots"], body["default_generation_settings"]["speculative"]

    assert props() == (6, True)
    assert client.post("/cluster/replicas", json={"replicas": 3}).status_code == 200
    assert props() == (9, True)
    assert client.post("/cluster/replicas", json={"replicas": 1}).status_code == 200
    assert props() == (3, True)
    # read from the engine, not copied at a scale: a replica back from a restart (the health loop takes
    # its new report) counts at once
    engine.slots[0].info = replace(info, max_num_seqs=5, speculative=False)
    assert props() == (5, False)
