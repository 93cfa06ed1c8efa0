"""The models one server serves: each loaded on its first request (in a worker thread, so the server
keeps answering), unloaded least-recently-used when the next one would not fit the memory budget, or
once idle for its keep-alive (Ollama's keep_alive: --keep-alive, a --models entry's, a request's:
hearth.api.model_keep_alive). Each model's ModelSpec is hearth.api.model_spec's, its /v1/models card
hearth.api.model_cards'.

A pinned model is never unloaded; a model with requests in flight (or an answer that holds it between its
engine requests: hearth.api.model_holds) is not unloaded under them (its turn waits up to `busy_wait_s`,
then the request that needed the room gets a 503 saying why, with `Retry-After`; one that can never fit
gets a 503 its SDK does not retry). The loading itself is the `loader` that `hearth serve` injects (tests
inject fakes): nothing here touches torch."""

from __future__ import annotations

import asyncio
import gc
import itertools
import math
import sys
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from hearth.api.errors import RETRY_AFTER_S, APIError
from hearth.api.model_cards import card
from hearth.api.model_keep_alive import KeepAlive
from hearth.api.model_spec import Known, Loader, ModelSpec
from hearth.api.served import ServedModel
from hearth.engine.async_engine import EngineShutdownError
from hearth.errors import HearthError
from hearth.tool_guard.routing import RouterConfig

TAG = ":latest"
"""Ollama's default tag: a model's name with it names the model (ModelPool.resolve), on every route."""

GiB = 2**30


@dataclass
class _Slot:
    spec: ModelSpec
    served: ServedModel | None = None
    loading: asyncio.Future | None = None
    reserved: bool = False
    """Its footprint is counted: loaded, or being loaded."""
    last_used: int = 0
    pending: int = 0
    """Requests that chose it and have not yet queued in its engine (or hold a lease)."""
    created: int = field(default_factory=lambda: int(time.time()))
    keep_alive: float = math.inf
    """Seconds it stays loaded once idle: its spec's from each load, then the last request's keep_alive."""
    idle_since: float | None = None
    """When (the pool's clock) the idle check first saw it idle since its last request; None: in use since."""

    def busy(self) -> bool:
        served = self.served
        return self.pending > 0 or (served is not None and (served.engine.num_in_flight > 0 or served.holds.count > 0))


class ModelPool(KeepAlive):
    def __init__(self, specs: list[ModelSpec], loader: Loader | None, max_memory: int = 0,
                 busy_wait_s: float = 30.0, clock: Callable[[], float] = time.monotonic, tick_s: float = 1.0):
        """`max_memory`: bytes all loaded models may hold together; 0 = no limit. `clock` (seconds) and
        `tick_s` (how often idle models are checked): tests give a fake clock and a short tick."""
        if not specs:
            raise ValueError("a server needs at least one model")
        self.loader, self.max_memory, self.busy_wait_s = loader, max_memory, busy_wait_s
        self.clock, self.tick_s = clock, tick_s
        self.slots = [_Slot(s, keep_alive=s.keep_alive) for s in specs]
        self._idle_check: asyncio.Task | None = None
        self._by_name: dict[str, _Slot] = {}
        for slot in self.slots:
            for name in slot.spec.names:
                other = self._by_name.setdefault(name, slot)
                if other is not slot:
                    raise ValueError(f"model name {name!r} is used by both {other.spec.name!r} and {slot.spec.name!r}")
        self._by_file: dict[str, list[_Slot]] = {}  # a name that is no model's own -> the models of that file
        for slot in self.slots:
            for name in slot.spec.file_names:
                if name not in self._by_name:
                    self._by_file.setdefault(name, []).append(slot)
        self._clock = itertools.count(1)
        self._room = asyncio.Lock()
        self._closing = False
        """Set as a shutdown begins (end_streams, close): requests waiting for a load end, no load starts."""
        self._waiting: set[asyncio.Future] = set()
        """One per request waiting for a load, set as a shutdown begins (not an asyncio.Event: a pool may
        outlive its event loop, as a test's app served twice)."""

    @classmethod
    def of(cls, served: list[ServedModel], routers: dict[str, RouterConfig] | None = None) -> ModelPool:
        """A server of models already loaded and pinned (the eval's in-process server; tests);
        `routers`: model id -> its router."""
        routers = routers or {}
        pool = cls([ModelSpec(list(s.names), pinned=True, max_model_len=s.max_model_len, router=routers.get(s.name),
                              file_names=list(s.file_names), pinned_why="this server was given it loaded and "
                              "cannot load it again") for s in served], None)
        for slot, s in zip(pool.slots, served):
            slot.served, slot.reserved, slot.created = s, True, s.created
        return pool

    @classmethod
    def single(cls, served: ServedModel) -> ModelPool:
        """A server of one model, already loaded (create_app given a ServedModel: the tests' fakes)."""
        return cls.of([served])

    # -- lifecycle --

    def preload(self) -> None:
        """Load the pinned models and the first (the default) now, before the server listens, so a
        model that cannot load is one CLI line. The first waits for its first request if it does not fit."""
        first = self.slots[0]
        for slot in self.slots:  # said once here: its every request got a 503 and the start said nothing
            if self.max_memory and slot.spec.footprint > self.max_memory and not slot.spec.pinned:
                _say(f"{slot.spec.name} needs {_gib(slot.spec.footprint)} with its KV cache, more than the memory "
                     f"budget of {_gib(self.max_memory)} (--max-memory): its requests will get 503 "
                     f"(model_too_large){_share(slot.spec)}")
        for slot in [s for s in self.slots if s.spec.pinned] + ([] if first.spec.pinned else [first]):
            over = self.max_memory and self._used() + slot.spec.footprint > self.max_memory
            if over and slot.spec.pinned:
                pinned = [s for s in self.slots if s.spec.pinned]
                raise HearthError(f"the pinned models ({', '.join(s.spec.name for s in pinned)}) need "
                                  f"{_gib(sum(s.spec.footprint for s in pinned))}, more than --max-memory "
                                  f"{_gib(self.max_memory)}")
            if not over and slot.served is None:
                _say(f"loading {slot.spec.name} ({_gib(slot.spec.footprint)} with its KV cache) ...")
                t0 = time.perf_counter()
                slot.served, slot.reserved, slot.keep_alive = self.loader(slot.spec), True, slot.spec.keep_alive
                _say(f"loaded {slot.spec.name} in {time.perf_counter() - t0:.1f}s "
                     f"(context {slot.served.max_model_len} tokens)")

    async def start(self) -> None:
        """Start the engines of models given loaded; load the pinned ones (before the port opens)."""
        self._closing = False  # an app served again (tests) serves again
        for slot in self.slots:
            if slot.served is not None:
                slot.served.engine.start()
        for slot in self.slots:
            if slot.spec.pinned and slot.served is None:
                await self._ensure_loaded(slot)
        if self.loader is not None and not all(s.spec.pinned for s in self.slots):
            self._idle_check = asyncio.ensure_future(self._check_idle_forever())

    def end_streams(self) -> None:
        """A shutdown begins: every request in flight ends now with an error its client sees (an SSE
        error event, else a 503), so that the server need not wait for (or cancel) long answers; so does
        every request still waiting for its model to load (_ensure_loaded), which no engine holds yet."""
        self._shut()
        for slot in self.slots:
            # a test's fake engine has none: its requests run to the end
            end = getattr(slot.served.engine, "end_streams", None) if slot.served is not None else None
            if end is not None:
                end(_shutting_down())

    def _shut(self) -> None:
        self._closing = True
        for waiting in self._waiting:
            if not waiting.done():
                waiting.set_result(None)

    async def close(self) -> None:
        self._shut()  # a shutdown without end_streams (an app's lifespan alone) ends the waiters too
        if self._idle_check is not None:
            self._idle_check.cancel()
        # a load under way cannot be stopped in its thread: wait for it, so its engine is shut down below
        loads = [s.loading for s in self.slots if s.loading is not None]
        if loads:
            await asyncio.wait(loads)
        for load in loads:  # read: a load that failed (or was refused by the shutdown) with no request left to tell
            load.cancelled() or load.exception()
        for slot in self.slots:
            if slot.served is not None:
                served, slot.served = slot.served, None
                await asyncio.to_thread(served.engine.shutdown)

    # -- requests --

    def resolve(self, requested: str | None) -> _Slot:
        """The slot a request's `model` names; none given: the first model (a one-model server takes any client)."""
        if not requested:
            return self.slots[0]
        name = self._untagged(requested)
        slot = self._by_name.get(name)
        files = self._by_file.get(name, [])
        if slot is None and len(files) > 1:  # as `ollama` and vLLM never guess a model: say which ids to use
            raise APIError(400, f"model {requested!r} is ambiguous: it names the file of {len(files)} models this "
                           f"server serves ({', '.join(repr(s.spec.name) for s in files)}); give one of those ids",
                           param="model", code="model_ambiguous")
        slot = slot or (files[0] if files else None)
        if slot is None:
            raise APIError(404, f"model {requested!r} does not exist; this server serves {self.ids_text()}",
                           param="model", code="model_not_found")
        return slot

    def _untagged(self, requested: str) -> str:
        """A name as served: `NAME:latest` is NAME (Ollama's default tag, which /api/tags lists and its clients send
        to every route, OpenAI's too) unless the tagged name is itself served."""
        if requested in self._by_name or requested in self._by_file:
            return requested
        return requested.removesuffix(TAG)

    def context(self, requested: str | None) -> int:
        """The context (tokens) of the model a request names, loaded or not: a route checks what needs no engine
        against it before the load (hearth.api.sampling.check_before_load). Before its load, its file's header
        and the planner's (ModelSpec.max_model_len, which the loaded engine's equals: tests/server/
        test_serve_models.py); 0: not known."""
        return self.known(requested).max_model_len

    def known(self, requested: str | None) -> Known:
        """What a route checks the request against before the model it names loads (its context, vocabulary,
        width, pooling, LoRA adapters, disk tier: hearth.api.model_spec.Known), so a bad request loads nothing and
        unloads nothing; an unknown model is its 404 here."""
        slot = self.resolve(requested)
        served = slot.served
        if served is not None:
            adapters = len(served.lora.paths) if served.lora is not None else 0
            return Known.of(slot.spec.name, served.max_model_len, served, adapters, served.snapshots is not None)
        facts = slot.spec.facts  # a model with recurrent layers runs without the server's disk tier
        kv_disk = slot.spec.kv_disk and not (facts is not None and facts.recurrent)
        return Known.of(slot.spec.name, slot.spec.max_model_len, facts, slot.spec.lora_count, kv_disk)

    async def get(self, requested: str | None) -> ServedModel:
        """The served model for a request, loaded if need be. Call Generation before the next await:
        from then on the engine's requests in flight keep it loaded."""
        slot = self.resolve(requested)
        slot.last_used, slot.idle_since = next(self._clock), None
        slot.pending += 1
        try:
            return await self._ensure_loaded(slot)
        finally:
            slot.pending -= 1

    @asynccontextmanager
    async def lease(self, requested: str | None):
        """The served model, kept loaded for the whole block (work spanning several awaits)."""
        slot = self.resolve(requested)
        slot.last_used, slot.idle_since = next(self._clock), None
        slot.pending += 1
        try:
            yield await self._ensure_loaded(slot)
        finally:
            slot.pending -= 1


    async def _check_idle_forever(self) -> None:
        while True:
            await asyncio.sleep(self.tick_s)
            try:
                await self.check_idle()
            except Exception as e:  # one failed unload must not end the idle check for every model
                _say(f"the idle check failed: {type(e).__name__}: {e}")

    def loaded(self) -> list[ServedModel]:
        return [s.served for s in self.slots if s.served is not None]

    def ids_text(self) -> str:
        return ", ".join(repr(s.spec.name) for s in self.slots)

    def cards(self) -> list[dict]:
        """/v1/models: each model's id and the aliases the user gave (not its file's names, which clients'
        pickers would show as more models); `root` is the id an alias belongs to (a --lora-modules adapter's: its file,
        `parent` the id); `hearth` says its state (and a loaded model's vision projector)."""
        return [card(slot, name) for slot in self.slots for name in slot.spec.names]

    # -- loading and unloading --

    async def _ensure_loaded(self, slot: _Slot) -> ServedModel:
        if self._closing:  # its engine would refuse it too; an unloaded model is not loaded for it
            raise _shutting_down()
        if slot.served is not None:
            return slot.served
        if slot.loading is None:  # one load per model; every request for it waits on the same one
            slot.loading = asyncio.ensure_future(self._load(slot))
        # until the load ends or a shutdown begins: end_streams reaches no request that no engine holds yet.
        # asyncio.wait cancels neither (a request that leaves does not cancel the load the others wait on)
        loading, closing = slot.loading, asyncio.get_running_loop().create_future()
        self._waiting.add(closing)
        try:
            await asyncio.wait([loading, closing], return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._waiting.discard(closing)
        if not loading.done():
            raise _shutting_down()
        return loading.result()

    async def _load(self, slot: _Slot) -> ServedModel:
        spec = slot.spec
        try:
            async with self._room:
                await self._make_room(slot)
                if self._closing:  # its requests have ended: nothing to load it for
                    raise _shutting_down()
                slot.reserved = True
            _say(f"loading {spec.name} ({_gib(spec.footprint)} with its KV cache) ...")
            t0 = time.perf_counter()
            try:
                served = await asyncio.to_thread(self.loader, spec)
            except Exception as e:  # its requests get a 503 that says why; the next one tries again
                _say(f"loading {spec.name} failed: {type(e).__name__}: {e}")
                raise APIError(503, f"model {spec.name!r} failed to load: {e}", param="model",
                               code="model_load_failed") from None
            served.engine.start()
            slot.served, slot.created, slot.keep_alive = served, int(time.time()), spec.keep_alive
            _say(f"loaded {spec.name} in {time.perf_counter() - t0:.1f}s (context {served.max_model_len} tokens)")
            return served
        except BaseException:
            slot.reserved = slot.served is not None
            raise
        finally:
            slot.loading = None

    def _used(self) -> int:
        return sum(s.spec.footprint for s in self.slots if s.reserved)

    async def _make_room(self, slot: _Slot) -> None:
        """Unload idle, unpinned models, least recently used first, until `slot` fits; refuse (503,
        nothing unloaded) a model that cannot fit beside the pinned ones."""
        need, budget = slot.spec.footprint, self.max_memory
        if not budget or self._used() + need <= budget:
            return
        pinned = [s for s in self.slots if s.spec.pinned and s.reserved and s is not slot]
        held = sum(s.spec.footprint for s in pinned)
        if need + held > budget:
            beside = f" beside the pinned {', '.join(s.spec.name for s in pinned)} ({_gib(held)})" if pinned else ""
            raise APIError(503, f"model {slot.spec.name!r} needs {_gib(need)}, which does not fit the server's "
                           f"memory budget of {_gib(budget)}{beside} (--max-memory){_share(slot.spec)}",
                           param="model", code="model_too_large", permanent=True)
        deadline = time.monotonic() + self.busy_wait_s
        while self._used() + need > budget:
            if self._closing:  # its requests have ended: nothing to make room for
                raise _shutting_down()
            idle = [s for s in self.slots if s.served is not None and not s.spec.pinned and not s.busy()]
            if idle:
                await self._unload(min(idle, key=lambda s: s.last_used),
                                   f"(least recently used) to make room for {slot.spec.name}")
                continue
            if time.monotonic() >= deadline:
                busy = [s.spec.name for s in self.slots if s.reserved and not s.spec.pinned and s is not slot]
                raise APIError(503, f"model {slot.spec.name!r} needs {_gib(need)} of the {_gib(budget)} budget "
                               f"and {_gib(budget - self._used())} is free; the models holding the rest "
                               f"({', '.join(busy)}) are still serving requests or loading after the {self.busy_wait_s:g} s "
                               "this request waited for them: retry shortly", param="model", code="model_busy",
                               retry_after=RETRY_AFTER_S)
            await asyncio.sleep(0.05)

    async def _unload(self, victim: _Slot, why: str) -> None:
        engine, victim.served, victim.idle_since = victim.served.engine, None, None
        _say(f"unloading {victim.spec.name} {why}")
        await asyncio.to_thread(engine.shutdown)
        del engine
        await asyncio.to_thread(gc.collect)  # the model's tensors may sit in reference cycles: free them now
        victim.reserved = False


def _shutting_down() -> EngineShutdownError:
    """What a request that a shutdown ends gets (as end_streams' engines give theirs): a 503, or its stream's error."""
    return EngineShutdownError("the server is shutting down")


def _say(line: str) -> None:
    """A progress line in the server's log (stderr, as `hearth serve`'s own lines)."""
    print(f"hearth: {line}", file=sys.stderr, flush=True)


def _share(spec: ModelSpec) -> str:
    """What makes most of a model's share, and the setting that lowers it (a too-large model's 503)."""
    if not spec.kv_bytes:
        return ""
    weights = spec.footprint - spec.kv_bytes  # with one step's activations and the tokenizer
    if spec.kv_bytes >= weights:
        return (f"; most of that is its KV cache ({_gib(spec.kv_bytes)}): --kv-cache-memory-gb caps it (default "
                "2 GiB), and its `context` in the --models file (or --max-model-len) sizes it below that cap")
    return f"; most of that is its weights ({_gib(weights)}): a smaller quantization of the model needs less"


def _gib(n: int) -> str:
    return f"{n / GiB:.2f} GiB"
