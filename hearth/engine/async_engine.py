"""AsyncEngine: the engine loop on a background thread, one asyncio stream of deltas per request.

A model step blocks for milliseconds to seconds, so it runs on its own thread; the event loop (the
server's) only sends commands and awaits outputs. Only the engine thread touches EngineCore after
start(), except check_request, which reads nothing that changes."""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hearth.engine.engine_core import EngineCore
from hearth.errors import HearthError
from hearth.kvstore.disk import DiskStats
from hearth.media.inputs import MediaInput
from hearth.outputs import EngineOutput
from hearth.sampling_params import SamplingParams
from hearth.spec_decode.policy import SpecDecodeStats

log = logging.getLogger("hearth.engine")


class EngineFullError(HearthError):
    """Too many requests are queued (the server answers 429)."""


class EngineStepError(HearthError):
    """The model step failed: the requests it ran end with this error (every request in flight where
    the failure was outside the runner, the engine's bookkeeping then being in doubt)."""


class EngineShutdownError(HearthError):
    """The server is shutting down: requests in flight end with this (the server answers 503; a
    stream gets an error event), new ones are refused."""


@dataclass(slots=True)
class EngineStats:
    num_running: int
    num_waiting: int
    kv_blocks_used: int
    kv_blocks_total: int
    prefix_cache_queries: int
    prefix_cache_hits: int
    prefix_cache_disk_hits: int = 0
    disk: DiskStats | None = None
    """The disk tier's counters, when there is one."""
    spec: SpecDecodeStats | None = None
    """Speculative decoding's counters, when it is on."""
    num_preemptions: int = 0
    """Requests the scheduler preempted for KV room (freed, recomputed later): vLLM's num_preemptions."""


@dataclass(frozen=True, slots=True)
class RunningRequest:
    """One request the scheduler runs, copied for GET /slots (read from another thread: a step apart at most)."""
    request_id: str
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    params: SamplingParams
    num_computed_tokens: int
    """Tokens whose KV is computed (the prompt's, then the answer's)."""
    num_cached_tokens: int
    """Prompt tokens the prefix cache gave it."""


class RequestStream:
    """Async iterator over one request's EngineOutput deltas. Use it as an async context manager:
    leaving the block early (client gone, task cancelled) aborts the request and frees its blocks."""

    def __init__(self, engine: AsyncEngine, request_id: str):
        self.engine, self.request_id = engine, request_id
        self.finished = False
        self._queue: asyncio.Queue[EngineOutput | BaseException] = asyncio.Queue()
        self._loop = asyncio.get_running_loop()

    def _put(self, item: EngineOutput | BaseException) -> None:
        """Called from the engine thread. A reader whose event loop has closed is gone: its output is
        dropped (the engine thread must not die of it; its request is aborted when it finishes)."""
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # "Event loop is closed"
            if not self._loop.is_closed():
                raise

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> EngineOutput:
        if self.finished:
            raise StopAsyncIteration
        item = await self._queue.get()
        if isinstance(item, BaseException):
            self._end()
            raise item
        if item.finished:
            self._end()
        return item

    async def __aenter__(self) -> RequestStream:
        return self

    async def __aexit__(self, *exc) -> None:
        self.abort()

    def abort(self) -> None:
        if not self.finished:
            self._end()
            self.engine._abort(self.request_id)

    def _end(self) -> None:
        self.finished = True
        self.engine._in_flight -= 1


class AsyncEngine:
    def __init__(self, core: EngineCore, max_queued: int = 256, thread_init: Callable[[], None] | None = None):
        """`thread_init`: run first on the engine thread (per-model settings such as its torch threads)."""
        self.core = core
        self._thread_init = thread_init
        self.max_in_flight = core.scheduler.max_num_seqs + max_queued
        self._in_flight = 0
        """Streams not yet finished; read and written on the event loop only."""
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._streams: dict[str, RequestStream] = {}
        """Engine-thread side: where each request's outputs go."""
        self._ids = itertools.count()
        self._stopping = False
        self._closing: EngineShutdownError | None = None
        """Set by end_streams: what every later add_request raises."""
        self._thread = threading.Thread(target=self._run, name="hearth-engine", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def total_slots(self) -> int:
        """Sequences it decodes together (EngineConfig.max_num_seqs): /props' total_slots."""
        return self.core.scheduler.max_num_seqs

    @property
    def speculative(self) -> bool:
        """Speculative decoding runs in it (asked for, and not turned off at the load: LLM.speculation_off)."""
        return self.core.spec is not None

    @property
    def num_in_flight(self) -> int:
        """Requests added and not yet finished or aborted (a server does not unload the model under them)."""
        return self._in_flight

    def shutdown(self) -> None:
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout=30)
        self.core.close()

    def end_streams(self, error: EngineShutdownError) -> None:
        """Shutdown's first step: end every request in flight with `error` after the step that runs
        now (their clients get an error event, not a cut stream) and refuse new ones."""
        self._closing = error
        self._send(("end_all", error))

    def add_request(self, prompt_token_ids: list[int], params: SamplingParams,
                    request_id: str | None = None, media: Sequence[MediaInput] = ()) -> RequestStream:
        """Queue a request; bad prompts and a full queue raise here, before any output. media: image
        spans in the prompt (EngineCore.add_request)."""
        if self._closing is not None:
            raise _fresh(self._closing)
        if self._stopping:  # its loop answers nothing more (a model unloaded between get() and here)
            raise EngineShutdownError("the model was unloaded as this request reached it; send it again")
        params = self.core.check_request(prompt_token_ids, params, media) or params  # an encoder's: None
        if self._in_flight >= self.max_in_flight:
            raise EngineFullError(f"{self._in_flight} requests are in flight (limit {self.max_in_flight}); "
                                  "retry later")
        rid = request_id if request_id is not None else f"req-{next(self._ids)}"
        stream = RequestStream(self, rid)
        self._in_flight += 1
        self._send(("add", stream, list(prompt_token_ids), params, tuple(media)))
        return stream

    async def export_prefix(self, prompt_token_ids: list[int]) -> list[bytes]:
        """EngineCore.export_prefix, run on the engine thread between steps."""
        future = asyncio.get_running_loop().create_future()
        self._send(("export", future, list(prompt_token_ids)))
        return await future

    def last_sequence(self) -> list[int]:
        """EngineCore.last_sequence (set on the engine thread, read whole: one reference)."""
        return list(self.core.last_sequence)

    def stats(self) -> EngineStats:
        """A snapshot for metrics; read from another thread, so the counts may be a step apart."""
        s = self.core.scheduler
        if s.kv is None:  # a model that only embeds (hearth.engine.encoder_core): no KV cache
            return EngineStats(len(s.running), len(s.waiting), 0, 0, 0, 0)
        disk = s.kv.disk.stats if s.kv.disk is not None else None
        spec = self.core.spec
        return EngineStats(len(s.running), len(s.waiting), s.kv.num_used_blocks, s.kv.pool.num_blocks,
                           s.kv.stats.queries, s.kv.stats.hits, s.kv.stats.disk_hits, disk,
                           None if spec is None else spec.stats.snapshot(), s.num_preemptions)

    def running_requests(self) -> list[RunningRequest]:
        """The requests being run now, in the scheduler's order (an encoder's queue runs none between steps)."""
        return [RunningRequest(r.request_id, list(r.prompt_token_ids), list(r.output_token_ids), r.params,
                               r.num_computed_tokens, r.num_cached_tokens) for r in list(self.core.scheduler.running)]

    def _abort(self, request_id: str) -> None:
        """The engine thread takes the abort between steps; the runner's queued work for the request (an image
        not yet encoding) goes at once, not after the step that runs now (EngineCore.abort_soon)."""
        soon = getattr(self.core, "abort_soon", None)  # an encoder-only core (EncoderCore) queues no such work
        if soon is not None:
            soon(request_id)
        self._send(("abort", request_id))

    def _send(self, command: tuple) -> None:
        self._commands.put(command)
        self._wake.set()

    def _run(self) -> None:
        if self._thread_init is not None:
            self._thread_init()
        while not self._stopping:
            try:
                self._iterate()
            except Exception as e:  # the thread must not die: every stream would wait forever
                log.exception("engine step failed")
                failed = self.core.failed_step()
                self._fail(EngineStepError(f"engine step failed: {type(e).__name__}: {e}"),
                           list(self._streams) if failed is None else failed)

    def _iterate(self) -> None:
        self._wake.clear()
        self._drain_commands()
        if not self.core.has_unfinished():
            self._wake.wait()
            return
        for out in self.core.step():
            stream = self._streams.get(out.request_id)
            if stream is not None:
                stream._put(out if out.error is None else out.error)
            if out.finished:
                self._streams.pop(out.request_id, None)
        if self.core.stalled:  # nothing could run: wait for a command (cleared above, so none is missed)
            self._wake.wait()

    def _drain_commands(self) -> None:
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
            if command[0] == "add":
                _, stream, ids, params, media = command
                try:
                    self.core.add_request(ids, params, stream.request_id, checked=True, media=media)
                except Exception as e:  # this request fails, the engine goes on
                    stream._put(e if isinstance(e, HearthError) else EngineStepError(f"{type(e).__name__}: {e}"))
                    continue
                self._streams[stream.request_id] = stream
            elif command[0] == "export":
                self._export(*command[1:])
            elif command[0] == "end_all":
                self._fail(command[1], list(self._streams))
            else:
                self.core.abort(command[1])
                self._streams.pop(command[1], None)

    def _export(self, future: asyncio.Future, ids: list[int]) -> None:
        def settle(value, error):
            if future.done():  # the caller went away
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(value)

        try:
            result, error = self.core.export_prefix(ids), None
        except Exception as e:
            log.exception("KV export failed")
            result, error = None, EngineStepError(f"KV export failed: {type(e).__name__}: {e}")
        future.get_loop().call_soon_threadsafe(settle, result, error)

    def _fail(self, error: HearthError, request_ids: list[str]) -> None:
        """End these requests with `error` (each stream gets it even where aborting raises too)."""
        for rid in request_ids:
            stream = self._streams.pop(rid, None)
            try:
                self.core.abort(rid)
            except Exception:  # noqa: BLE001  (its client is answered all the same)
                log.exception("abort after a failed step failed")
            if stream is not None:
                stream._put(_fresh(error))


def _fresh(error: HearthError) -> HearthError:
    """A new instance of `error` for each request it ends: one shared instance, raised again and again
    (every refused request, every stream), would chain each raise's traceback onto the last."""
    return type(error)(*error.args)
