"""Repacked weights kept on disk, so the next load of the same GGUF maps them instead of repacking.

llama.cpp maps its file and is ready; the torch paths want other layouts (int4pack planes, bf16), which
cost seconds to build (Qwen2.5-Coder-1.5B: ~6 s of a 6.6 s load). Built once per file, they are
written next to the models and mapped read-only on later loads, like the GGUF itself:

    $HEARTH_HOME/cache/repack/<file id>/source.json     the GGUF's path, size, mtime_ns, inode
    $HEARTH_HOME/cache/repack/<file id>/<part>.npy      one uint8 blob per repacked linear part

The file id hashes the GGUF's path and stat (a file edited or replaced gets a new id); a part's name
hashes the layout's version, torch's version and CPU capability (they decide the int4pack layout), and
the tensors' names, types, shapes and first and last bytes. A directory whose source no longer matches
its GGUF (deleted, replaced) is removed at the next load of any model. Entries are written atomically
and read only when their size is right; any failure (an unwritable HEARTH_HOME, a damaged file) just
means repacking. HEARTH_REPACK_CACHE=0 turns it off; files under MIN_FILE_BYTES (test models) never
use it."""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from hearth.layers.residency import memmap_root
from hearth.loader.array_cache import cache_key, write_atomic
from hearth.loader.gguf_loader import GGUFTensor
from hearth.loader.store import hearth_home

LAYOUT_VERSION = b"repack-1"
"""Bump when a repacked layout changes meaning (hearth.layers.repack, hearth.kernels.qmatmul)."""
MIN_FILE_BYTES = 32 << 20
"""Smaller GGUFs repack in well under a second: not worth disk space (nor litter from test files)."""
_pruned: set[Path] = set()


def enabled() -> bool:
    return os.environ.get("HEARTH_REPACK_CACHE", "1") != "0"


def _source(path: Path) -> dict | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}


def _file_dir(t: GGUFTensor) -> Path | None:
    """The cache directory of the GGUF t's data maps, or None (not a big file's memmap, or off)."""
    root = memmap_root(t.data) if isinstance(t.data, np.ndarray) else None
    if not enabled() or root is None or root.filename is None:
        return None
    source = _source(Path(root.filename).resolve())
    if source is None or source["size"] < MIN_FILE_BYTES:
        return None
    base = hearth_home() / "cache" / "repack"
    _prune(base)
    folder = base / cache_key([json.dumps(source, sort_keys=True).encode()])
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not (folder / "source.json").exists():
            write_atomic(folder / "source.json", lambda f: f.write(json.dumps(source).encode()))
    except OSError:
        return None
    return folder


def _prune(base: Path) -> None:
    """Once per process: drop the directories of GGUFs that were deleted or replaced."""
    if base in _pruned:
        return
    _pruned.add(base)
    for folder in base.glob("*/") if base.is_dir() else ():
        try:
            source = json.loads((folder / "source.json").read_text())
            stale = _source(Path(source["path"])) != source
        except (OSError, ValueError, KeyError, TypeError):
            stale = True
        if stale:
            shutil.rmtree(folder, ignore_errors=True)


def _part_key(kind: str, ts: list[GGUFTensor]) -> str:
    # the int4pack layout follows torch's version and its ATen CPU capability (ATEN_CPU_CAPABILITY)
    parts = [LAYOUT_VERSION, torch.__version__.encode(), torch.backends.cpu.get_cpu_capability().encode(), kind.encode()]
    for t in ts:
        raw = np.asarray(t.data).reshape(-1).view(np.uint8)
        parts += [t.name.encode(), t.qtype.name.encode(), repr(t.shape).encode(), raw[:64].tobytes(),
                  raw[-64:].tobytes()]
    return cache_key(parts)


def cached_blob(kind: str, ts: list[GGUFTensor], nbytes: int, build: Callable[[], torch.Tensor]) -> torch.Tensor:
    """uint8 [nbytes]: build()'s blob for these tensors, mapped read-only from the cache when a
    previous load stored it, else built (and stored for the next load)."""
    folder = _file_dir(ts[0])
    if folder is None:
        return build()
    path = folder / f"{_part_key(kind, ts)}.npy"
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
        if arr.dtype == np.uint8 and arr.shape == (nbytes,):
            with warnings.catch_warnings():  # read-only map: the kernels only read weights
                warnings.filterwarnings("ignore", message=".*not writable.*")
                return torch.from_numpy(arr)
    except (OSError, ValueError, EOFError):
        pass
    blob = build()
    try:
        write_atomic(path, lambda f: np.save(f, blob.numpy(), allow_pickle=False))
    except OSError:
        pass
    return blob
