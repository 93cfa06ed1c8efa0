"""One background thread that runs the vision encoder ahead of and beside the engine's steps, first come
first served, so a step never waits for an image (a SigLIP-400M image at 896 px takes ~50 s on 2 cores).

Only this thread calls the encoder; the step thread hands it jobs and takes back finished ones (the
rows or the exception), so MediaRows' caches are touched by the step thread alone. The native kernels
keep their scratch buffers thread_local (hearth/kernels/csrc) and torch runs each calling thread's
parallel regions in its own OpenMP team, so the two threads share no mutable state (and the rows are the
step thread's bit for bit: checked on a SmolVLM-256M-shaped tower, 1 and 2 threads). The encode keeps all
of torch's threads: the OS shares the cores between the two teams. Capping it (torch.set_num_threads(1)
in this thread) also sets MKL's process-wide count and the one later threads start with, and measured
worse on 2 cores: the other request's median inter-token gap 0.02-0.22 s vs 0.013 s uncapped, the
image's first token later too (benchmarks/bench_encode_ahead.py, 2026-12-07, load ~9: noisy).

Each queued job knows the requests waiting for it: an abort takes a job only they waited for out of the queue
from the abort's own thread (`abort`), since the engine thread hears of it only after the step it runs."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

import torch


class EncodeWorker:
    def __init__(self, encode: Callable[[object], torch.Tensor]):
        """encode: a job's item (a MediaInput) -> its rows (raises on a bad image: the exception is the job's result)."""
        self.encode = encode
        self._cv = threading.Condition()
        self._queue: deque[tuple[bytes, object, set[str]]] = deque()  # (digest, item, the requests waiting), FCFS
        self._running: bytes | None = None
        self._done: list[tuple[bytes, torch.Tensor | BaseException]] = []
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, digest: bytes, item, owner: str) -> None:
        """Queue the encode of `item` for request `owner` (MediaRows submits a digest once; `join` adds the
        other requests that wait for it)."""
        with self._cv:
            self._queue.append((digest, item, {owner}))
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="hearth-encode", daemon=True)
                self._thread.start()
            self._cv.notify_all()

    def join(self, digest: bytes, owner: str) -> bool:
        """Request `owner` waits for `digest`'s job too; False when no job of it will report (every request that
        waited was aborted: `abort` took it out of the queue), so it is to be submitted again."""
        with self._cv:
            for d, _, owners in self._queue:
                if d == digest:
                    owners.add(owner)
                    return True
            return digest == self._running or any(d == digest for d, _ in self._done)

    def abort(self, owner: str) -> None:
        """Request `owner` ended: the queued jobs only it waited for go now, before the thread can start them.
        Any thread may call it (the abort's own, before the engine thread's next step tells MediaRows)."""
        with self._cv:
            for job in list(self._queue):
                job[2].discard(owner)
                if not job[2]:
                    self._queue.remove(job)
            self._cv.notify_all()  # a wait on a removed job's digest ends now

    def drop(self, digest: bytes) -> bool:
        """Remove a queued job (its requests ended); False when it is running or finished already (it reports)."""
        with self._cv:
            for job in self._queue:
                if job[0] == digest:
                    self._queue.remove(job)
                    return True
            return not (digest == self._running or any(d == digest for d, _ in self._done))

    def close(self) -> None:
        """Drop the queued jobs; the thread ends after the one it runs (its result is never taken)."""
        with self._cv:
            self._queue.clear()
            self._closed = True
            self._cv.notify_all()

    def take(self) -> list[tuple[bytes, torch.Tensor | BaseException]]:
        """The jobs finished since the last take, in order."""
        with self._cv:
            done, self._done = self._done, []
        return done

    def wait(self, timeout: float | None = None, digest: bytes | None = None) -> None:
        """Until a job has finished (or `digest`'s job: it must be pending), or timeout seconds."""
        with self._cv:
            if digest is None:
                self._cv.wait_for(lambda: self._done or not (self._queue or self._running), timeout)
            else:
                self._cv.wait_for(lambda: not (digest == self._running or any(d == digest for d, *_ in self._queue)),
                                  timeout)

    def _serve(self) -> None:
        while self._run_one():
            pass

    def _run_one(self) -> bool:
        """One job, False once closed. Its own frame: the thread keeps no reference to the last job's pixels or
        rows while it waits for the next (they go with the request, or MediaRows' bound)."""
        with self._cv:
            self._cv.wait_for(lambda: self._queue or self._closed)
            if self._closed:
                return False
            digest, item, _ = self._queue.popleft()
            self._running = digest
        try:
            with torch.inference_mode():
                result = self.encode(item)
        except Exception as e:  # noqa: BLE001 - the job's result: it ends its requests only
            result = e
        with self._cv:
            self._done.append((digest, result))
            self._running = None
            self._cv.notify_all()
        return True
