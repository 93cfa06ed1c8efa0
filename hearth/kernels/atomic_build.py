"""Compile a kernel library into its cache file whole or not at all.

The compiler writes a partial file beside the cache file (`<name>.<random>.partial`: never a name a
later run loads), renamed into place once it succeeds and removed when it fails or is interrupted.
The compiler runs in a session of its own and, on Ctrl-C or a timeout, is killed with what it started
(cc1plus, as, ld), so none of them writes the file after it is removed. A run killed outright
(SIGTERM, SIGKILL) cannot clean up: the next build sweeps partials older than any build may run."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

BUILD_TIMEOUT = 300
"""Seconds a compile may run before it is killed (a failed build: the next tier, or torch)."""
PARTIAL = ".partial"
STALE = ("*" + PARTIAL, "tmp*.so")
"""What a killed build leaves, older than 2 * BUILD_TIMEOUT: this module's partials, and the
tmp*.so of hearths before it (mkstemp's names)."""


def build_into(out: Path, command: Callable[[str], list[str]]) -> Path:
    """Run command(partial) (a compiler writing to the path it is given) and move its output to
    `out`; a RuntimeError with the compiler's first error line when it fails."""
    sweep(out.parent)
    fd, partial = tempfile.mkstemp(prefix=f"{out.name}.", suffix=PARTIAL, dir=out.parent)
    try:
        os.close(fd)
        cmd = command(partial)
        returncode, stderr = _run(cmd)
        if returncode != 0:
            lines = stderr.strip().splitlines() or ["?"]
            first = next((line for line in lines if "error" in line), lines[-1])
            raise RuntimeError(f"{Path(cmd[0]).name} failed: {first.strip()}")
        os.replace(partial, out)  # atomic: a concurrent build of the same key writes the same bytes
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
    return out


def _run(cmd: list[str]) -> tuple[int, str]:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        _, stderr = proc.communicate(timeout=BUILD_TIMEOUT)
    except BaseException:  # Ctrl-C (which the compiler's session did not get), the timeout
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the driver and its children: none writes after this
        proc.wait()
        raise
    return proc.returncode, stderr


def sweep(folder: Path) -> None:
    """Remove what killed builds left in `folder` (see STALE); a live build's partial is younger."""
    cutoff = time.time() - 2 * BUILD_TIMEOUT
    for pattern in STALE:
        for path in folder.glob(pattern):
            with contextlib.suppress(OSError):  # gone already (another sweep), or not ours to remove
                if path.stat().st_mtime < cutoff:
                    path.unlink()
