"""Peak RSS per level: the high-water mark is reset before a level and read after it, for this
process or another one on the machine (a server)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hearth.bench.rss import MemoryProbe, peak_rss_bytes, reset_peak_rss

MiB = 2**20
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM and clear_refs are Linux's")


def _touch(n: int) -> bytearray:
    big = bytearray(n)  # zero pages: write one byte a page so they are resident
    big[::4096] = b"\1" * len(big[::4096])
    return big


def levels() -> None:
    probe = MemoryProbe()
    big = _touch(200 * MiB)  # the warm-up's peak
    high = peak_rss_bytes()
    del big
    probe.start_level()
    first = probe.level_peak()
    assert high - first > 150 * MiB and probe.per_level
    probe.start_level()
    big = _touch(100 * MiB)  # the second level's peak
    del big
    second = probe.level_peak()
    assert 80 * MiB < second - first < 150 * MiB, (first, second)
    # the run's peak keeps what came before the levels (the kernel's RSS counters are per-CPU: a few pages off)
    assert probe.run_peak([first, second]) > high - 4 * MiB


def test_a_level_after_a_reset_sees_its_own_peak():
    """In a fresh process: in a test worker, memory that earlier tests freed can stay resident and be
    reused, so a level's touch raised no peak (CI saw second == first once)."""
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", "from tests.bench.test_rss import levels; levels()"], cwd=root,
                   env={**os.environ, "PYTHONPATH": str(root)}, check=True, timeout=120)


def test_another_process():
    code = "b = bytearray(64 << 20); b[::4096] = b'1' * len(b[::4096]); del b; print(flush=True); input()"
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        child.stdout.readline()  # it has touched 64 MiB and let it go
        assert peak_rss_bytes(child.pid) > 64 * MiB
        assert reset_peak_rss(child.pid)
        assert peak_rss_bytes(child.pid) < 64 * MiB
    finally:
        child.communicate(b"\n")
    assert peak_rss_bytes(child.pid) is None  # gone
