"""Arrays derived from a model file, kept on disk so the next load skips computing them.

A file is named by a hash of everything the array is computed from, written atomically (temporary
file, rename), and read back only when it parses as the .npy it should be; anything else (missing,
damaged, an unwritable HEARTH_HOME) just means computing the array again."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO

import numpy as np

from hearth.loader.store import hearth_home


def cache_key(parts: Iterable[bytes]) -> str:
    h = hashlib.blake2b(digest_size=20)
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.hexdigest()


def cached_array(kind: str, key: str, compute: Callable[[], np.ndarray]) -> np.ndarray:
    """compute(), or the array a previous call with the same kind and key stored."""
    path = hearth_home() / "cache" / kind / f"{key}.npy"
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError):
        pass
    arr = compute()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, lambda f: np.save(f, arr, allow_pickle=False))
    except OSError:
        pass
    return arr


def write_atomic(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """write(file) into a temporary file beside path, then renamed over it: readers see the old file
    or the whole new one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
