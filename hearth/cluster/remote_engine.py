"""ClusterEngine: the engine the API's routes see (AsyncEngine's add_request / stats / start /
shutdown), forwarding each request to a replica actor picked by the router.

A request's deltas come back over a Ray streaming generator. A replica that dies before a request's
first delta costs nothing visible: the request is sent once more, to another replica. One that dies
mid-answer ends the stream with EngineStepError (the routes turn it into an error event, or a 500
body), never a hang. A shutdown (Ctrl-C) ends every open stream at once with EngineShutdownError, as
AsyncEngine.end_streams does. Ray restarts a dead replica's actor (max_restarts); the health loop marks it
down until it has loaded again."""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, fields

from hearth.cluster.replica import ReplicaError, ReplicaInfo
from hearth.cluster.router import ReplicaLoad, Router
from hearth.engine.async_engine import EngineFullError, EngineShutdownError, EngineStats, EngineStepError
from hearth.engine.engine_core import InvalidPromptError, check_request
from hearth.outputs import EngineOutput
from hearth.sampling_params import SamplingParams

log = logging.getLogger("hearth.cluster")
_SUMMED = [f.name for f in fields(EngineStats) if f.type in ("int", int)]


@dataclass(slots=True)
class ReplicaSlot:
    """One replica as the front end tracks it; the slot (and its name) outlives actor restarts."""
    name: str
    handle: object
    info: ReplicaInfo
    up: bool = True
    in_flight: int = 0
    answering: int = 0
    """Of those in flight, the ones that have sent output (a failure now cuts their answer)."""
    routed: int = 0
    restarts: int = 0
    stats: EngineStats | None = None
    draining: bool = False
    """Being scaled away: takes no new request, finishes those it has."""

    def load(self) -> ReplicaLoad:
        return ReplicaLoad(self.up and not self.draining, self.in_flight, self.info.capacity)


class ClusterEngine:
    def __init__(self, slots: list[ReplicaSlot], router: Router, health_interval_s: float = 1.0,
                 call_timeout_s: float = 10.0):
        self.slots, self.router = slots, router
        self.health_interval_s, self.call_timeout_s = health_interval_s, call_timeout_s
        info = slots[0].info
        self.max_model_len, self.vocab_size = info.max_model_len, info.vocab_size
        self.model_context, self.max_logprobs = info.model_context, info.max_logprobs
        self._health: asyncio.Task | None = None
        self._stopping = False
        self._closing: EngineShutdownError | None = None
        """Set by end_streams: what every later add_request raises."""
        self._open: set[RemoteStream] = set()
        """Streams not yet ended (end_streams ends them)."""

    # -- the AsyncEngine interface the routes and the app use --------------------------------------
    def start(self) -> None:
        self._health = asyncio.get_running_loop().create_task(self._health_loop())

    def shutdown(self) -> None:
        """Called off the event loop (app lifespan); Ray itself is shut down by the command."""
        self._stopping = True
        import ray

        for slot in self.slots:
            ray.kill(slot.handle, no_restart=True)

    def end_streams(self, error: EngineShutdownError) -> None:
        """Shutdown's first step (on the event loop): every open stream ends now with `error` (its
        client gets an error event, not a cut stream after uvicorn's graceful timeout), new requests
        are refused with it."""
        self._closing = error
        for stream in list(self._open):
            stream.shut(error)

    def add_request(self, prompt_token_ids: list[int], params: SamplingParams,
                    request_id: str | None = None, media=()) -> RemoteStream:
        """Bad prompts raise here, as AsyncEngine's do (a 400 before any output); so does a
        cluster with no replica up or every replica full (429), or one shutting down (503)."""
        if self._closing is not None:
            raise EngineShutdownError(*self._closing.args)
        if media:  # the replicas' wire carries token ids only
            raise InvalidPromptError("a cluster does not carry images to its replicas yet: serve the model alone")
        check_request(prompt_token_ids, params, self.max_model_len, self.vocab_size, self.model_context,
                      self.max_logprobs)
        return RemoteStream(self, list(prompt_token_ids), params, request_id or uuid.uuid4().hex,
                            self._choose(prompt_token_ids))

    def stats(self) -> EngineStats:
        """The replicas' last stats, summed (the disk tier's and speculation's stay per replica)."""
        total = EngineStats(**dict.fromkeys(_SUMMED, 0))
        for s in self.slots:
            if s.stats is not None:
                for f in _SUMMED:
                    setattr(total, f, getattr(total, f) + getattr(s.stats, f))
        return total

    @property
    def total_slots(self) -> int:
        """Sequences the replicas that take requests decode together, as each reported it when it loaded
        (no Ray call): /props' total_slots."""
        return sum(s.info.max_num_seqs for s in self.slots if not s.draining)

    @property
    def max_in_flight(self) -> int:
        """Requests the replicas that take requests hold at once (each's capacity, as it reported it; one
        restarting counts: it will hold them again), as AsyncEngine's: a request of more is a 400."""
        return sum(s.info.capacity for s in self.slots if not s.draining)

    @property
    def num_in_flight(self) -> int:
        return sum(s.in_flight for s in self.slots)

    @property
    def speculative(self) -> bool:
        """Whether the replicas speculate (they run one configuration), as they reported it when they loaded."""
        return any(s.info.speculative for s in self.slots)

    def replica_stats(self) -> dict[str, EngineStats]:
        """Each replica's last stats, for /metrics' `replica` label."""
        return {s.name: s.stats for s in self.slots if s.stats is not None}

    async def refresh_stats(self) -> None:
        """Ask every replica that is up now (a scrape shows current counters, not the last poll's)."""
        await asyncio.gather(*(self._poll(s) for s in self.slots if s.up))

    # -- routing and health ---------------------------------------------------------------------
    def _choose(self, prompt_token_ids: list[int], avoid: ReplicaSlot | None = None) -> ReplicaSlot:
        loads = [s.load() for s in self.slots]
        if avoid is not None:
            loads[self.slots.index(avoid)].up = False
        i = self.router.pick(prompt_token_ids, loads)
        if i is None:
            up = sum(s.up and not s.draining for s in self.slots)
            why = "no replica is up (restarting)" if not up else f"all {up} replicas up are full"
            raise EngineFullError(f"{why}; retry later")
        slot = self.slots[i]
        slot.in_flight += 1
        slot.routed += 1
        return slot

    def replica_failed(self, slot: ReplicaSlot, error: BaseException) -> None:
        if slot.up:
            log.warning("replica %s failed (%s); Ray restarts it", slot.name, type(error).__name__)
            slot.up = False

    async def _health_loop(self) -> None:
        while not self._stopping:
            await asyncio.gather(*(self._poll(s) for s in self.slots), return_exceptions=True)
            await asyncio.sleep(self.health_interval_s)

    async def _poll(self, slot: ReplicaSlot) -> None:
        """An up replica is asked for stats; a down one whether it has loaded again."""
        try:
            if slot.up:
                slot.stats = await asyncio.wait_for(_await(slot.handle.stats.remote()), self.call_timeout_s)
                return
            result = await asyncio.wait_for(_await(slot.handle.ready.remote()), self.call_timeout_s)
        except Exception as e:  # noqa: BLE001 - any failure to answer marks the replica down
            if not self._stopping:
                self.replica_failed(slot, e)
            return
        if isinstance(result, ReplicaInfo):  # a slow answer to a poll also lands here: same pid
            slot.restarts += result.pid != slot.info.pid
            slot.info, slot.up, slot.stats = result, True, None
            log.warning("replica %s is back (pid %d)", slot.name, result.pid)


async def _await(ref):
    return await ref


class RemoteStream:
    """AsyncEngine's RequestStream over a replica: async iterator of EngineOutput, abort() on exit."""

    def __init__(self, engine: ClusterEngine, ids: list[int], params: SamplingParams, request_id: str,
                 slot: ReplicaSlot):
        self.engine, self.ids, self.params, self.request_id = engine, ids, params, request_id
        self.slot = slot
        self._holding = True
        """slot.in_flight counts this stream."""
        self.finished = False
        self.retries = 1
        self._seen_output = False
        self._shutdown: asyncio.Future | None = None
        """Resolved by shut(): the error the stream ends with, whatever the replica is doing."""
        self._gen = self._call(slot)
        engine._open.add(self)

    def _call(self, slot: ReplicaSlot):
        return slot.handle.generate.options(num_returns="streaming").remote(self.ids, self.params, self.request_id)

    def __aiter__(self) -> RemoteStream:
        return self

    async def __anext__(self) -> EngineOutput:
        import ray

        if self.finished:
            raise StopAsyncIteration
        while True:
            try:
                item = await self._next_or_shutdown()
            except StopAsyncIteration:
                self._end()
                raise EngineStepError(f"replica {self.slot.name} ended the answer without finishing it") from None
            except ray.exceptions.RayError as e:
                self._replica_lost(e)
                continue
            if isinstance(item, ReplicaError):
                self._end()
                raise item.as_error()
            if not self._seen_output:
                self._seen_output = True
                self.slot.answering += 1
            if item.finished:
                self._end()
            return item

    async def _next_or_shutdown(self):
        """The replica's next item, unless shut() comes first: then its error is raised at once."""
        if self._shutdown is None:
            self._shutdown = asyncio.get_running_loop().create_future()
        nxt = asyncio.ensure_future(self._next())
        try:
            await asyncio.wait((nxt, self._shutdown), return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not nxt.done():  # shut, or the caller cancelled: the replica's item is not waited for
                nxt.cancel()
        if self._shutdown.done():  # first, or with the item: the stream ends here all the same
            self.abort()
            raise EngineShutdownError(*self._shutdown.result().args)
        return nxt.result()

    async def _next(self):
        return await (await self._gen.__anext__())

    def shut(self, error: EngineShutdownError) -> None:
        """End this stream with `error` now (a waiting __anext__ raises it; a later one too)."""
        if self._shutdown is None:
            self._shutdown = asyncio.get_running_loop().create_future()
        if not self._shutdown.done():
            self._shutdown.set_result(error)

    def _replica_lost(self, e: BaseException) -> None:
        """Retry once elsewhere if nothing came out yet; else end the stream with the error."""
        lost = self.slot
        self.engine.replica_failed(lost, e)
        if self._seen_output or self.retries == 0:
            self._end()
            why = "mid-answer" if self._seen_output else "twice before answering"
            raise EngineStepError(f"replica {lost.name} died {why}; the answer is incomplete") from None
        self.retries -= 1
        self._release()
        try:
            self.slot = self.engine._choose(self.ids, avoid=lost)
        except EngineFullError:
            self._end()  # released above: this only marks it ended
            raise
        self._holding = True
        self._gen = self._call(self.slot)

    async def __aenter__(self) -> RemoteStream:
        return self

    async def __aexit__(self, *exc) -> None:
        self.abort()

    def abort(self) -> None:
        if not self.finished:
            import ray

            self._end()
            try:
                ray.cancel(self._gen)  # the replica's generator is cancelled: it aborts the request
            except Exception:  # noqa: BLE001 - the replica may be gone already
                pass

    def _end(self) -> None:
        self.finished = True
        self.engine._open.discard(self)
        self._release()

    def _release(self) -> None:
        if self._holding:
            self.slot.in_flight -= 1
            self.slot.answering -= self._seen_output
            self._holding = False
