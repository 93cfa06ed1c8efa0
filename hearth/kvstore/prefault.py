"""Making a lazily mapped KV cache's next pages resident while the engine is idle.

The cache's pages become resident on first write (paged.lazy_zeros), so a fresh prompt's K/V writes
page-fault: 2,304 faults for 512 gemma3 tokens, 1-4% of its prefill here. Between steps, a background
thread faults in the pages of the blocks the pool hands out next (madvise MADV_POPULATE_WRITE,
Linux 5.14+), a slice at a time, and drops what is left when the next step starts. Elsewhere (other
systems, older kernels) it does nothing: the writes fault as before."""

from __future__ import annotations

import atexit
import ctypes
import os
import sys
import threading

import torch

MADV_POPULATE_WRITE = 23  # linux/mman.h
PAGE = 4096
SLICE = 256 << 10
"""Bytes per madvise call: a step that starts meanwhile overlaps at most one slice (~0.1 ms)."""


def _madvise():
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise  # a ctypes call releases the GIL
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
    return fn


class Prefaulter:
    def __init__(self, regions: list[tuple[torch.Tensor, int, int]]):
        """regions: (tensor, address of block 0, bytes per block) of each run of consecutive blocks
        (BlockIO.regions); the tensors are held so that their mappings outlive any call."""
        self.regions = regions
        self._madvise = _madvise()
        self._work: list[tuple[int, int]] = []
        """(address, bytes) slices still to fault in, the next one last (guarded by _CV)."""
        self._in_flight = False

    def start(self, blocks: range) -> None:
        """Fault in the pages of these consecutive blocks in every region, in the background,
        replacing earlier work."""
        if self._madvise is None or _stopped:
            return
        work = []
        for _, base, size in self.regions:
            lo, hi = (base + blocks.start * size) & ~(PAGE - 1), base + blocks.stop * size
            work += [(a, min(SLICE, hi - a)) for a in range(lo, hi, SLICE)]
        with _CV:
            self._work = work[::-1]
            if self not in _QUEUE:
                _QUEUE.append(self)
            _start_worker()
            _CV.notify()

    def pause(self) -> None:
        """Drop the slices not started yet (the next idle step names the blocks again)."""
        with _CV:
            self._work = []

    @property
    def busy(self) -> bool:
        with _CV:
            return bool(self._work) or self._in_flight


# One worker thread per process serves every Prefaulter with work, so that starting work costs a
# notify, not a thread start (~0.5 ms, paid by the step that goes idle). It holds no Prefaulter
# while it waits.
_CV = threading.Condition()
_QUEUE: list[Prefaulter] = []
_worker: threading.Thread | None = None
_stopped = False


def _after_fork() -> None:
    """A forked child has no worker thread, and the lock may have been held by it at the fork."""
    global _CV, _worker
    _CV, _worker = threading.Condition(), None
    _QUEUE.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _start_worker() -> None:
    global _worker
    if _worker is None and not _stopped:
        _worker = threading.Thread(target=_serve, name="hearth-prefault", daemon=True)
        _worker.start()


def _pending() -> bool:
    _QUEUE[:] = [p for p in _QUEUE if p._work]
    return bool(_QUEUE)


def shutdown() -> None:
    """Stop the worker and drop its queue (at exit, before the interpreter finalizes): a daemon thread
    that frees a Prefaulter's tensors while Python finalizes is killed inside torch's deleter, and
    the process aborts ("terminate called without an active exception")."""
    global _stopped
    with _CV:
        _stopped = True
        _QUEUE.clear()
        _CV.notify()
    if _worker is not None and _worker is not threading.current_thread():
        _worker.join(timeout=5)  # at most one madvise slice (~0.1 ms) is in flight


atexit.register(shutdown)


def _serve() -> None:
    while True:
        with _CV:
            _CV.wait_for(lambda: _stopped or _pending())
            if _stopped:
                return
            p = _QUEUE[0]
            addr, n = p._work.pop()
            p._in_flight = True
        ok = p._madvise(addr, n, MADV_POPULATE_WRITE) == 0  # fails (EINVAL) before Linux 5.14
        with _CV:
            p._in_flight = False
            if not ok:
                p._madvise, p._work = None, []
        del p
