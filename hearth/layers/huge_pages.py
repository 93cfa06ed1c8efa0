"""Weights the C++ kernels stream every step, moved from the GGUF's file mapping into 2 MB pages.

A decode step reads every weight once: Qwen2.5-Coder-1.5B's 1.1 GB are ~270,000 4 KB pages of page cache,
each a TLB miss and a page walk; in anonymous memory advised MADV_HUGEPAGE they are ~550 2 MB pages (one
thread's decode of that model 1.12x faster in CPU time on a Zen 4 VM: docs/performance.md). A file mapping
gets 2 MB pages only from kernels built with CONFIG_READ_ONLY_THP_FOR_FS, which most leave out; hence a copy.
Costs: one read of the weights at load (from the page cache where the file is there), and the weights are
this process's own memory rather than page cache other processes share.

Used in place instead: HEARTH_HUGE_PAGES=0, transparent huge pages `never` (or not Linux), a tensor that is
not a view of a read-only file mapping, or a file that would leave less than RESERVE of MemAvailable (a
model larger than memory still runs from its mapping)."""

from __future__ import annotations

import functools
import mmap
import os
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from hearth.layers.residency import memmap_root

HUGE = 2 << 20
CHUNK = 256 << 20
"""Address space a chunk reserves; only what is copied into it becomes resident."""
ALIGN = 64
PIECE = 2 << 20
RESERVE = 1 << 30
"""MemAvailable the copy of a file must leave."""
THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")


@functools.cache
def mode() -> str:
    """Where streamed weights live: "2 MB pages" or why they stay in the file mapping (`hearth doctor`)."""
    if os.environ.get("HEARTH_HUGE_PAGES", "1") == "0":
        return "the file mapping (HEARTH_HUGE_PAGES=0)"
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
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


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


_arenas: dict[int, _Arena] = {}
"""id(file mapping) -> its arena, while the mapping lives: a model's weights share no chunk with another
model's, so they go with it."""


def in_huge_pages(raw: torch.Tensor, source: np.ndarray | torch.Tensor) -> torch.Tensor:
    """raw (uint8 [rows, bytes], a view of `source`'s memory) read again from its file into 2 MB pages, or
    raw itself (the module docstring says when). Read with pread, not copied from the mapping: the
    mapping's 4 KB page faults cost more than the copy."""
    root = memmap_root(source) if isinstance(source, np.ndarray) else None
    if root is None or root.mode != "r" or raw.numel() == 0 or mode() != "2 MB pages":
        return raw
    if (arena := _arenas.get(id(root))) is None:
        arena = _arenas[id(root)] = _Arena(root.nbytes)
        weakref.finalize(root, _arenas.pop, id(root), None)
    flat = arena.take(raw.numel())
    if flat is None:
        return raw
    _read(root.filename, raw.data_ptr() - root.ctypes.data + root.offset, flat)
    return flat.view(raw.shape)


def _read(path: str, at: int, out: torch.Tensor) -> None:
    """out.numel() bytes of the file from offset `at` into out, in PIECE-sized reads on torch's threads: a VM's
    host backs each new 2 MB page as it is first written, and one thread alone met that at ~0.5 GB/s."""
    view, fd = memoryview(out.numpy()), os.open(path, os.O_RDONLY)
    try:
        pieces = [(view[i:i + PIECE], at + i) for i in range(0, view.nbytes, PIECE)]
        if len(pieces) == 1:
            _read_piece(fd, *pieces[0], path)
        else:
            list(_readers(torch.get_num_threads()).map(lambda p: _read_piece(fd, *p, path), pieces))
    finally:
        os.close(fd)


@functools.cache
def _readers(n: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(n, thread_name_prefix="hearth-weights")


def _read_piece(fd: int, view: memoryview, at: int, path: str) -> None:
    while view.nbytes:  # a read may return less than asked
        got = os.preadv(fd, [view], at)
        if got <= 0:
            raise OSError(f"{path}: the file ended at byte {at} while its tensors were read")
        view, at = view[got:], at + got
