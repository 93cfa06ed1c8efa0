"""EncodeWorker and MediaRows when a request is aborted, with an encoder held on a gate (no model): its queued
encode never runs (the abort reaches the worker from the abort's own thread, not at the engine thread's next
step, after the one that runs), one another request waits for still runs, a request asking for the image after
the abort gets it, and the worker keeps no reference to a finished job's pixels or rows."""

from __future__ import annotations

import gc
import threading
import weakref

import torch

from hearth.engine.async_engine import AsyncEngine
from hearth.engine.engine_core import EngineCore
from hearth.media.inputs import MediaInput
from hearth.runner import media_rows
from hearth.runner.media_rows import MediaRows
from hearth.sampling_params import SamplingParams

WIDTH = 4


class Slow:
    """A vision encoder that waits for `gate` (a SigLIP image takes ~50 s on 2 cores); records what it encoded."""

    def __init__(self):
        self.gate, self.started, self.seen = threading.Event(), threading.Event(), []

    def encode(self, pixels) -> torch.Tensor:
        self.seen.append(int(pixels[0]))
        self.started.set()
        assert self.gate.wait(10), "the test never opened the gate"
        return torch.full((3, WIDTH), float(pixels[0]))


def image(seed: int) -> MediaInput:
    return MediaInput(0, 3, bytes([seed]), torch.full((2,), float(seed)))


def on_another_thread(fn, *args) -> None:
    """As AsyncEngine's loop thread calls it while the engine thread runs a step."""
    t = threading.Thread(target=fn, args=args)
    t.start()
    t.join(5)


def settled(rows: MediaRows, *seeds: int) -> None:
    """Until these images' jobs are neither queued nor running."""
    for s in seeds:
        rows.worker.wait(5, digest=bytes([s]))


def test_an_aborted_requests_queued_encode_never_runs():
    vision = Slow()
    rows = MediaRows(vision, WIDTH)
    rows.submit([("a", image(1)), ("b", image(2)), ("b", image(3)), ("c", image(4)), ("d", image(4))])
    assert vision.started.wait(5)  # 1 encodes; 2, 3 (b's) and 4 (c's and d's) are queued
    on_another_thread(rows.abort, "b")
    on_another_thread(rows.abort, "c")  # d still waits for 4
    vision.gate.set()
    settled(rows, 1, 2, 3, 4)
    assert vision.seen == [1, 4]  # b's never ran: dropped before the worker could start them
    rows.forget("b")  # the engine's next step: its end in finished_request_ids
    rows.forget("c")
    assert rows.report() == ({"a": [bytes([1])], "d": [bytes([4])]}, {})
    assert not rows.waiters and rows.encoding == 0 and not rows.worker._queue


def test_a_request_asking_for_an_aborted_image_before_the_step_forgets_it_gets_it():
    """b's abort took the job out of the queue; e asks for the same image at the next step, before b's end is
    forgotten (its waiters entry still there): the image is submitted again, e never waits for a job gone."""
    vision = Slow()
    rows = MediaRows(vision, WIDTH)
    rows.submit([("a", image(1)), ("b", image(2))])
    assert vision.started.wait(5)
    on_another_thread(rows.abort, "b")
    rows.submit([("e", image(2))])
    rows.forget("b")
    vision.gate.set()
    settled(rows, 1, 2)
    assert vision.seen == [1, 2] and rows.report() == ({"a": [bytes([1])], "e": [bytes([2])]}, {})
    assert not rows.waiters and rows.encoding == 0


def test_the_worker_keeps_no_reference_to_a_finished_jobs_pixels_or_rows(monkeypatch):
    """Its thread held the last job's image and rows in its frame while it waited for the next: an aborted
    request's rows (and pixels) outlived MediaRows dropping them, until another image came."""
    monkeypatch.setattr(media_rows, "MAX_UNUSED", 0)  # an unused image's rows go as soon as no request reads them
    vision = Slow()
    vision.gate.set()
    rows = MediaRows(vision, WIDTH)
    m = image(1)
    pixels = weakref.ref(m.pixels)
    rows.submit([("a", m)])
    del m
    settled(rows, 1)
    assert rows.report() == ({"a": [bytes([1])]}, {})
    out = weakref.ref(rows.encoded[bytes([1])])
    rows.forget("a")
    gc.collect()
    assert not rows.encoded and out() is None and pixels() is None


class _Runner:
    def __init__(self):
        self.aborted = []

    def abort_soon(self, request_id: str) -> None:
        self.aborted.append((request_id, threading.current_thread().name))


class _Scheduler:
    max_num_seqs = 1


class _Core:
    scheduler, runner = _Scheduler(), _Runner()
    abort_soon = EngineCore.abort_soon

    @staticmethod
    def check_request(*args):
        return None


def test_a_streams_abort_reaches_the_runner_at_once():
    """AsyncEngine: the engine thread takes an abort between steps; the runner hears of it from the abort's own
    thread first (EngineCore.abort_soon -> ModelRunner.abort_soon: its queued encodes go)."""
    import asyncio

    core = _Core()
    engine = AsyncEngine(core)  # not started: the engine thread is busy elsewhere, as in a long step

    async def run():
        stream = engine.add_request([1, 2], SamplingParams())
        stream.abort()
        return stream.request_id

    rid = asyncio.run(run())
    assert core.runner.aborted == [(rid, threading.current_thread().name)]


def test_a_wait_on_an_aborted_job_ends_when_it_is_dropped():
    """A wait for a queued job's digest ends when an abort takes the job out, not at its timeout."""
    vision = Slow()
    rows = MediaRows(vision, WIDTH)
    rows.submit([("a", image(1)), ("b", image(2))])
    assert vision.started.wait(5)  # 1 encodes, 2 is queued
    waiter = threading.Thread(target=rows.worker.wait, args=(None,), kwargs={"digest": bytes([2])}, daemon=True)
    waiter.start()
    on_another_thread(rows.abort, "b")
    waiter.join(5)
    alive = waiter.is_alive()
    vision.gate.set()
    settled(rows, 1)
    assert not alive  # without a notify it waits forever (timeout None)
