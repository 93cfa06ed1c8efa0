"""Peak resident memory of the measured process: this one (in-process) or a server on this machine
(--server-pid). Linux keeps the high-water mark in /proc/PID/status (VmHWM) and lets its owner reset
it (clear_refs 5), so each concurrency level gets its own peak instead of the run's so far."""

from __future__ import annotations

import platform
from pathlib import Path

from hearth.bench import BenchError


def _proc(pid: int | None) -> Path:
    return Path("/proc") / (str(pid) if pid is not None else "self")


def peak_rss_bytes(pid: int | None = None) -> int | None:
    """The process's peak RSS since it started or since the last reset; None where nobody says."""
    try:
        for line in (_proc(pid) / "status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    if pid is not None:
        return None
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if platform.system() == "Darwin" else peak * 1024  # macOS says bytes, Linux KiB


def reset_peak_rss(pid: int | None = None) -> bool:
    """Start a new high-water mark at the current RSS (Linux 4.0+); False where that is not possible."""
    try:
        (_proc(pid) / "clear_refs").write_text("5")
        return True
    except OSError:
        return False


def check_server_pid(pid: int) -> int:
    """A --server-pid that this user can read the memory of, or a one-line error."""
    if pid <= 0:
        raise BenchError(f"--server-pid must be a process id, got {pid}")
    if peak_rss_bytes(pid) is None:
        raise BenchError(f"--server-pid {pid}: no such process whose memory can be read here "
                         "(it must run on this Linux machine)")
    return pid


class MemoryProbe:
    """Peaks of one process (pid None: this one) per concurrency level: reset before a level, read
    after it. Where a reset is refused the level peaks are the run's so far, and `per_level` says so."""

    def __init__(self, pid: int | None = None):
        self.pid = pid
        self.before: int | None = None
        """The peak before the first level: model load and warm-up included."""
        self.per_level = True

    def start_level(self) -> None:
        if self.before is None:
            self.before = peak_rss_bytes(self.pid)
        self.per_level = reset_peak_rss(self.pid) and self.per_level

    def level_peak(self) -> int | None:
        return peak_rss_bytes(self.pid)

    def run_peak(self, level_peaks: list[int | None]) -> int | None:
        known = [p for p in (self.before, *level_peaks) if p is not None]
        return max(known) if known else None
