"""Weights the C++ kernels stream every step, moved from the GGUF's file mapping into 2 MB pages.

A decode step reads every weight once: Qwen2.5-Coder-1.5B's 1.1 GB are ~270,000 4 KB pages of page cache,
each a TLB miss and a page walk; in anonymous memory advised MADV_HUGEPAGE they are ~550 2 MB pages (one
thread's decode of that model 1.12x faster in CPU time on a Zen 4 VM: docs/performance.md). A file mapping
gets 2 MB pages only from kernels built with CONFIG_READ_ONLY_THP_FOR_FS, which most leave out; hence a copy.

The copy is read after the load, on one background thread, while the model serves from the mapping; each
tensor's readers switch to it when it is complete (the same bytes: a kernel call may read either). So the load
takes no longer: fresh memory costs more than the read where a VM's host backs each new page on first touch
(~0.5 GB/s a thread in this project's VMs). Costs: one read of the weights (from the page cache where the
file is there) and one core for it while it runs; the weights are then this process's own memory rather
than page cache other processes share.

Used in place instead: HEARTH_HUGE_PAGES=0, transparent huge pages `never` (or not Linux), a tensor that is
not a view of a read-only file mapping, or a file that would leave less than RESERVE of MemAvailable (a
model larger than memory still runs from its mapping)."""

from __future__ import annotations

import functools
import logging
import mmap
import os
import queue
import threading
import weakref
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from hearth.layers.residency import memmap_root, release_pages

log = logging.getLogger("hearth")

HUGE = 2 << 20
CHUNK = 256 << 20
"""Address space a chunk reserves; only what is copied into it becomes resident."""
ALIGN = 64
RESERVE = 1 << 30
"""MemAvailable the copy of a file must leave."""
THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")
CGROUP_MAX, CGROUP_STAT = Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory.stat")

_arenas: dict[int, _Arena] = {}
"""id(file mapping) -> its arena, while the mapping lives: a model's weights share no chunk with another
model's, so they go with it."""
_jobs: queue.Queue = queue.Queue()
"""(path, offset, copy, done, source) of each move, in the order the model was built."""
_lock = threading.Lock()
_worker: threading.Thread | None = None
_failed: set[str] = set()
"""Files whose read failed once: one warning each."""


@functools.cache
def mode() -> str:
    """Where streamed weights live: "2 MB pages" or why they stay in the file mapping (`hearth doctor`)."""
    switch = os.environ.get("HEARTH_HUGE_PAGES", "1")
    if switch == "0":
        return "the file mapping (HEARTH_HUGE_PAGES=0)"
    if switch != "1":
        log.warning(f"HEARTH_HUGE_PAGES={switch!r} is neither 0 (the file mapping) nor 1 (2 MB pages, the default): "
                    "using 1")
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        return "the file mapping (no transparent huge pages on this OS)"
    try:
        thp = THP_MODE.read_text()
    except OSError:
        return "the file mapping (no transparent huge pages in this kernel)"
    if "[never]" in thp:
        return f"the file mapping (transparent huge pages are `never`: {THP_MODE})"
    return "2 MB pages"


def mem_available() -> int:
    """MemAvailable, or less where this process's cgroup (v2) allows less: its limit less its anonymous memory
    (a container's page cache is reclaimable as the host's is)."""
    with open("/proc/meminfo") as f:
        avail = next((int(ln.split()[1]) * 1024 for ln in f if ln.startswith("MemAvailable:")), 0)
    try:
        limit = CGROUP_MAX.read_text().strip()
        anon = next(int(ln.split()[1]) for ln in CGROUP_STAT.read_text().splitlines() if ln.startswith("anon "))
    except (OSError, StopIteration, ValueError):
        return avail
    return min(avail, int(limit) - anon) if limit.isdigit() else avail


class _Arena:
    """Bump allocation from anonymous mappings advised MADV_HUGEPAGE. A chunk stays mapped while any tensor
    in it lives (torch.frombuffer holds it)."""

    def __init__(self, file_bytes: int):
        self.chunk: torch.Tensor | None = None  # uint8 [CHUNK], 2 MB-aligned
        self.used = 0
        self.fits = mem_available() >= file_bytes + RESERVE
        """All of the file or none: a model copied in part would hold its rest in a page cache squeezed by the
        copy, where the mapping alone fitted."""

    def take(self, n: int) -> torch.Tensor | None:
        """uint8 [n], 64-byte aligned; None where the file does not fit twice."""
        if not self.fits:
            return None
        start = -(-self.used // ALIGN) * ALIGN
        if self.chunk is None or start + n > self.chunk.numel():
            size = max(CHUNK, -(-n // HUGE) * HUGE)
            buf = mmap.mmap(-1, size + HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            try:
                buf.madvise(mmap.MADV_HUGEPAGE)
            except OSError:  # a kernel built without THP: 4 KB pages, as the mapping's
                pass
            whole = torch.frombuffer(buf, dtype=torch.uint8)
            skip = -whole.data_ptr() % HUGE
            self.chunk, start = whole[skip:skip + size], 0
        self.used = start + n
        return self.chunk[start:start + n]


def move(raw: torch.Tensor, source: np.ndarray | torch.Tensor, done: Callable[[torch.Tensor], None]) -> bool:
    """Read raw (uint8 [rows, bytes], a view of `source`, a file mapping) again from its file into 2 MB pages on
    a background thread, then call done(copy) there; False where nothing was started (the module docstring
    says when). done must switch every reader to the copy: until then they read the mapping, the same bytes."""
    root = memmap_root(source) if isinstance(source, np.ndarray) else None
    if (root is None or root.mode != "r" or raw.numel() == 0 or not raw.is_contiguous()
            or mode() != "2 MB pages"):
        return False
    with _lock:
        if (arena := _arenas.get(id(root))) is None:
            arena = _arenas[id(root)] = _Arena(root.nbytes)
            weakref.finalize(root, _arenas.pop, id(root), None)
        flat = arena.take(raw.numel())
        if flat is None:
            return False
        _jobs.put((root.filename, raw.data_ptr() - root.ctypes.data + root.offset, flat.view(raw.shape), done,
                   source))
        global _worker
        if _worker is None:
            _worker = threading.Thread(target=_work, name="hearth-weights", daemon=True)
            _worker.start()
    return True


def wait() -> None:
    """Until every weight move started so far is done (tests; a measurement that must not overlap them)."""
    _jobs.join()


def _forked() -> None:
    """A forked child has no worker: its moves not done stay undone (it reads the mapping), wait() returns."""
    global _jobs, _lock, _worker
    _jobs, _lock, _worker = queue.Queue(), threading.Lock(), None


os.register_at_fork(after_in_child=_forked)


def _work() -> None:
    """One thread, in the order the model was built: serving goes on meanwhile from the mapping."""
    while True:
        job = _jobs.get()
        try:
            _move(*job)
        except Exception as e:  # noqa: BLE001 - the mapping serves on: the same bytes, only slower
            if job[0] not in _failed:
                _failed.add(job[0])
                log.warning(f"weights stay in their file mapping: {e}")
        finally:
            del job  # the model may go now
            _jobs.task_done()


def _move(path: str, at: int, out: torch.Tensor, done: Callable[[torch.Tensor], None], source: np.ndarray) -> None:
    _read(path, at, out.view(-1))
    done(out)
    release_pages(source)  # read no more here: out of this process's resident set


def _read(path: str, at: int, out: torch.Tensor) -> None:
    """out.numel() bytes of the file from offset `at` into out."""
    view, fd = memoryview(out.numpy()), os.open(path, os.O_RDONLY)
    try:
        while view.nbytes:  # a read may return less than asked
            got = os.preadv(fd, [view], at)
            if got <= 0:
                raise OSError(f"{path}: the file ended at byte {at} while its tensors were read")
            view, at = view[got:], at + got
    finally:
        os.close(fd)
