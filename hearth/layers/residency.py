"""Give back the resident file pages of a memmapped tensor once it has been repacked.

Reading a GGUF tensor to repack it faults its pages into this process; they would stay counted in
its resident set (RssFile) next to the repacked copy. MADV_DONTNEED on a read-only shared file
mapping only unmaps them here: the data stays in the file (and the page cache), and a later read
faults it back in (the embedding reads a few rows of token_embd that way)."""

from __future__ import annotations

import mmap
import sys

import numpy as np


def memmap_root(arr: np.ndarray) -> np.memmap | None:
    """The np.memmap created over the mmap itself (views are np.memmap too, but carry its offset)."""
    base = arr
    while isinstance(base, np.ndarray):
        if isinstance(base, np.memmap) and isinstance(base.base, mmap.mmap):
            return base
        base = base.base
    return None


def release_pages(arr: np.ndarray) -> bool:
    """Drop the whole pages under `arr` from this process's resident set if it is a view of a
    read-only np.memmap; anything else (anonymous memory would be zeroed!) is left alone."""
    root = memmap_root(arr) if sys.platform == "linux" and hasattr(mmap, "MADV_DONTNEED") else None
    if root is None or root.mode != "r" or arr.nbytes == 0:
        return False
    base_addr = root.ctypes.data - root.offset % mmap.ALLOCATIONGRANULARITY  # where the mmap starts
    page = mmap.PAGESIZE
    start = -(-(arr.ctypes.data - base_addr) // page) * page  # whole pages inside the tensor only
    stop = (arr.ctypes.data - base_addr + arr.nbytes) // page * page
    if stop > start:
        root._mmap.madvise(mmap.MADV_DONTNEED, start, stop - start)
    return True
