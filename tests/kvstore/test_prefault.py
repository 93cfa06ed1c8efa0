"""The idle-time prefault: exactly the named blocks' pages become resident, in every region."""

from __future__ import annotations

import ctypes
import sys
import time
from types import SimpleNamespace

import pytest
import torch

from hearth.backends.base import Backend
from hearth.config import ModelConfig
from hearth.kvstore.codecs import get_codec
from hearth.kvstore.paged import lazy_zeros
from hearth.kvstore.prefault import PAGE, SLICE, Prefaulter
from hearth.runner.messages import SchedulerOutput
from hearth.runner.model_runner import ModelRunner

NO_MODEL = SimpleNamespace(backend=Backend())  # the runner asks only for the backend here

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore and MADV_POPULATE_WRITE are Linux")

CFG = ModelConfig("llama", num_layers=3, hidden_size=128, num_heads=4, num_kv_heads=2, head_dim=64,
                  intermediate_size=256, vocab_size=100, context_length=512)


def resident(lo: int, hi: int) -> list[bool]:
    """Per page holding some of the bytes lo .. hi: is it in memory (mincore)."""
    lo &= ~(PAGE - 1)
    n = -(-(hi - lo) // PAGE)
    vec = (ctypes.c_ubyte * n)()
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.mincore(ctypes.c_void_p(lo), ctypes.c_size_t(n * PAGE), vec) == 0, ctypes.get_errno()
    return [bool(v & 1) for v in vec]


def pages(t: torch.Tensor) -> list[int]:
    return [i for i, r in enumerate(resident(t.data_ptr(), t.data_ptr() + t.numel() * t.element_size())) if r]


def settle(p: Prefaulter) -> None:
    deadline = time.monotonic() + 10
    while p.busy and time.monotonic() < deadline:
        time.sleep(0.001)
    assert not p.busy


def test_only_the_named_blocks_become_resident_in_each_region():
    a, b = lazy_zeros((64, PAGE), torch.uint8), lazy_zeros((64, PAGE), torch.uint8)
    p = Prefaulter([(a, a.data_ptr(), PAGE), (b, b.data_ptr(), 2 * PAGE)])  # blocks of 1 and 2 pages
    p.start(range(8, 12))
    settle(p)
    assert pages(a) == [8, 9, 10, 11] and pages(b) == list(range(16, 24))
    assert not a.any() and not b.any()  # resident pages still read zero


def test_pause_drops_the_slices_not_started():
    t = lazy_zeros((64 * SLICE // PAGE, PAGE), torch.uint8)
    p = Prefaulter([(t, t.data_ptr(), SLICE)])
    p.start(range(64))
    p.pause()
    settle(p)
    assert len(pages(t)) < t.shape[0]


@pytest.mark.parametrize("name", ["f16", "q8_0"])
def test_runner_faults_in_the_named_blocks_of_every_layer(name):
    codec = get_codec(name)
    runner = ModelRunner(NO_MODEL, CFG, 32, codec.block_size(None), codec, max_num_seqs=2)
    runner.execute(SchedulerOutput([], prefault_blocks=range(4, 12)))
    settle(runner.prefaulter)
    regions = runner.block_io.regions()
    fields = 2 if name == "f16" else sum(len(part) for part in runner.kv_caches[0].store.values())
    assert len(regions) == CFG.num_layers * fields  # every layer's K and V (each codec field)
    for _, base, size in regions:
        assert all(resident(base + 4 * size, base + 12 * size))
        assert not any(resident(base + 16 * size, base + 32 * size))


EXIT_SCRIPT = """
import atexit, sys

def check():  # registered before prefault's own exit handler, so it runs after it
    prefault = sys.modules["hearth.kvstore.prefault"]
    w = prefault._worker
    print("worker", "alive" if w is not None and w.is_alive() else "stopped", "queue", len(prefault._QUEUE))

atexit.register(check)
import torch
from hearth.kvstore import prefault
t = torch.zeros(64 * prefault.SLICE, dtype=torch.uint8)
p = prefault.Prefaulter([(t, t.data_ptr(), prefault.SLICE)])
p.start(range(64))
del p, t
"""


def test_the_worker_stops_before_the_interpreter_finalizes():
    """A worker still running at exit freed the last Prefaulter's tensors while Python finalized and
    the process aborted ("terminate called without an active exception", 1 `hearth run` in ~8)."""
    import subprocess
    out = subprocess.run([sys.executable, "-c", EXIT_SCRIPT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["worker", "stopped", "queue", "0"]


def test_start_after_shutdown_does_nothing(monkeypatch):
    from hearth.kvstore import prefault
    monkeypatch.setattr(prefault, "_stopped", True)
    monkeypatch.setattr(prefault, "_worker", None)
    t = lazy_zeros((8, PAGE), torch.uint8)
    p = Prefaulter([(t, t.data_ptr(), PAGE)])
    p.start(range(8))
    assert prefault._worker is None and pages(t) == []
