"""The idle-time prefault: exactly the named blocks' pages become resident, in every layer."""

from __future__ import annotations

import ctypes
import sys
import time

import pytest
import torch

from hearth.config import ModelConfig
from hearth.kvstore.codecs import get_codec
from hearth.kvstore.paged import lazy_zeros
from hearth.kvstore.prefault import PAGE, SLICE, Prefaulter
from hearth.runner.messages import SchedulerOutput
from hearth.runner.model_runner import ModelRunner

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore and MADV_POPULATE_WRITE are Linux")

CFG = ModelConfig("llama", num_layers=3, hidden_size=128, num_heads=4, num_kv_heads=2, head_dim=64,
                  intermediate_size=256, vocab_size=100, context_length=512)


def resident(t: torch.Tensor) -> list[bool]:
    """Per page holding some of t's bytes: is it in memory (mincore)."""
    lo = t.data_ptr() & ~(PAGE - 1)
    n = -(-(t.data_ptr() + t.numel() * t.element_size() - lo) // PAGE)
    vec = (ctypes.c_ubyte * n)()
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.mincore(ctypes.c_void_p(lo), ctypes.c_size_t(n * PAGE), vec) == 0, ctypes.get_errno()
    return [bool(v & 1) for v in vec]


def settle(p: Prefaulter) -> None:
    deadline = time.monotonic() + 10
    while p.busy and time.monotonic() < deadline:
        time.sleep(0.001)
    assert not p.busy


def test_only_the_given_spans_become_resident():
    t = lazy_zeros((64, PAGE), torch.uint8)
    p = Prefaulter()
    p.start([t[8:12], t[40:41]])
    settle(p)
    assert [i for i, r in enumerate(resident(t)) if r] == [8, 9, 10, 11, 40]
    assert not t.any()  # resident pages still read zero


def test_pause_drops_the_slices_not_started():
    t = lazy_zeros((64 * SLICE // PAGE, PAGE), torch.uint8)  # 64 slices
    p = Prefaulter()
    p.start([t])
    p.pause()
    settle(p)
    assert sum(resident(t)) < len(resident(t))


@pytest.mark.parametrize("name", ["f16", "q8_0"])
def test_runner_faults_in_the_named_blocks_of_every_layer(name):
    codec = get_codec(name)
    runner = ModelRunner(None, CFG, 32, codec.block_size(None), codec, max_num_seqs=2)
    runner.execute(SchedulerOutput([], prefault_blocks=range(4, 12)))
    settle(runner.prefaulter)
    named, rest = runner.block_io.spans(range(4, 12)), runner.block_io.spans(range(16, 32))
    assert all(all(resident(s)) for s in named)
    assert not any(any(resident(s)) for s in rest)
