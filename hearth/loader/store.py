"""Where hearth keeps model files, and how a file gets there whole or not at all.

    $HEARTH_HOME                         env var; default ~/.cache/hearth
      models/<name>/<file_name>          catalog models, e.g. models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf
      models/<name>/<file_name>.verified JSON {sha256, size, mtime_ns}: hashed once and matched the catalog
      hub/<org>/<repo>/<file>            Hugging Face downloads at revision main
      hub/<org>/<repo>@<rev>/<file>      ... at any other revision
      hub/.../<file>.part                an interrupted hub download, resumed by the next try
      tmp/                               staging, on the same filesystem so an install is one rename
      tmp/wheels-<name>/                 a catalog model's wheels until it is installed: a plan's first
                                         parts, an interrupted pull's finished ones (the next pull's start)

Local files a user names by path are loaded where they are and never copied here."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import BinaryIO

from tqdm import tqdm

from hearth.errors import DownloadError, HearthError
from hearth.loader.catalog import CatalogEntry

CHUNK = 1 << 20  # 1 MiB: big enough that hashing, not Python, is the cost


def hearth_home(home: str | os.PathLike | None = None) -> Path:
    if home is not None:
        return Path(home).expanduser()
    return Path(os.environ.get("HEARTH_HOME") or "~/.cache/hearth").expanduser()


HOME_FOLDERS = ("models", "hub", "tmp", "plan", "evals")
"""HEARTH_HOME's folders that commands write without a fallback (kernels/ and cache/ have theirs): one that is
a file or not writable (left by a `sudo hearth pull`, a container's root) was a traceback at its first write."""


def check_home(home: str | os.PathLike | None = None) -> Path:
    """hearth_home(), created if missing; a HearthError naming HEARTH_HOME and why where it, or one of its
    HOME_FOLDERS already there, cannot be a folder hearth writes to (a file, a read-only place): said once,
    before a command builds or pulls."""
    path = hearth_home(home)
    where = f"HEARTH_HOME ({path})" if os.environ.get("HEARTH_HOME") else f"the default HEARTH_HOME ({path})"
    if (reason := folder_problem(path)) is not None:
        raise HearthError(f"{where} is not a folder hearth can write to: {reason}; set HEARTH_HOME to one that is")
    for name in HOME_FOLDERS:
        if (path / name).exists() and (reason := folder_problem(path / name)) is not None:
            raise HearthError(f"{where}: its {name}/ is not a folder hearth can write to: {reason}; remove it or "
                              "make it this user's, or set HEARTH_HOME to another folder")
    return path


def folder_problem(path: Path) -> str | None:
    """Why `path` cannot be a folder hearth writes to (it is created if missing), or None. Writing is tried,
    not asked: os.access says yes to root on a folder a filesystem refuses (NFS root squash, sysfs)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        return "it is a file"
    except NotADirectoryError:
        return "a folder above it is a file"
    except OSError as e:  # PermissionError, a read-only filesystem, ...
        return f"it cannot be created ({e.strerror or e})"
    try:
        with tempfile.TemporaryFile(dir=path):
            return None
    except OSError as e:
        return f"it is not writable ({e.strerror or e})"


def catalog_path(entry: CatalogEntry, home: str | os.PathLike | None = None) -> Path:
    return hearth_home(home) / "models" / entry.name / entry.file_name


def staging_dir(home: str | os.PathLike | None = None) -> Path:
    path = hearth_home(home) / "tmp"
    path.mkdir(parents=True, exist_ok=True)
    return path


def wheel_dir(entry: CatalogEntry, home: str | os.PathLike | None = None) -> Path:
    return staging_dir(home) / f"wheels-{entry.name}"


def byte_bar(desc: str, total: int | None, progress: bool, initial: int = 0) -> tqdm:
    return tqdm(total=total, initial=initial, desc=desc, unit="B", unit_scale=True,
                file=sys.stderr, disable=not progress, leave=False, dynamic_ncols=True)


def copy_hashed(src: BinaryIO, dst: BinaryIO, hasher, bar: tqdm) -> int:
    """Stream src into dst chunk by chunk, hashing on the way; returns bytes copied."""
    n = 0
    while chunk := src.read(CHUNK):
        dst.write(chunk)
        hasher.update(chunk)
        bar.update(len(chunk))
        n += len(chunk)
    return n


def sha256_file(path: Path, progress: bool = False) -> str:
    hasher = hashlib.sha256()
    with open(path, "rb") as f, byte_bar(f"verifying {path.name}", path.stat().st_size, progress) as bar:
        while chunk := f.read(CHUNK):
            hasher.update(chunk)
            bar.update(len(chunk))
    return hasher.hexdigest()


def _marker(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def write_marker(path: Path, sha256: str) -> None:
    st = path.stat()
    tmp = path.with_name(f"{path.name}.verified.{os.getpid()}.tmp")  # two pulls at once must not collide
    tmp.write_text(json.dumps({"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}))
    os.replace(tmp, _marker(path))


def marker_matches(path: Path, entry: CatalogEntry) -> bool:
    """True when the file is the size the catalog says and was hashed since it last changed."""
    try:
        st = path.stat()
        mark = json.loads(_marker(path).read_text())
    except (OSError, ValueError):
        return False
    return (st.st_size == entry.size and mark.get("sha256") == entry.sha256
            and mark.get("size") == st.st_size and mark.get("mtime_ns") == st.st_mtime_ns)


def marker_sha256(path: Path) -> str | None:
    """The SHA-256 recorded for path when it was last hashed, if the file has not changed since."""
    try:
        st = path.stat()
        mark = json.loads(_marker(path).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(mark, dict) or mark.get("size") != st.st_size or mark.get("mtime_ns") != st.st_mtime_ns:
        return None
    sha = mark.get("sha256")
    return sha if isinstance(sha, str) else None


def is_verified(path: Path, entry: CatalogEntry, progress: bool = False) -> bool:
    """Size first (free), then the marker (one small read), and only then a full rehash."""
    if not path.is_file() or path.stat().st_size != entry.size:
        return False
    if marker_matches(path, entry):
        return True
    if sha256_file(path, progress) != entry.sha256:
        return False
    write_marker(path, entry.sha256)
    return True


def check_digest(what: str, size: int, sha256: str, want_size: int | None, want_sha256: str | None) -> None:
    if want_size is not None and size != want_size:
        raise DownloadError(f"{what}: got {size} bytes, expected {want_size}")
    if want_sha256 is not None and sha256 != want_sha256:
        raise DownloadError(f"{what}: sha256 mismatch (got {sha256}, expected {want_sha256})")


def install_file(staged: Path, dest: Path) -> Path:
    """Move a finished, verified file into place in one rename, so readers never see half a file."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staged, dest)
    return dest
