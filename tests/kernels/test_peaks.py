"""The roofline's passes (csrc/peaks.h) of every native tier's library this CPU runs (loaded beside the
selected one: native.open_tier), which `hearth plan` times for this machine's ceilings
(hearth.memory.bandwidth): the read pass reads every byte exactly once, in any number of interleaved
runs and threads, at any size and alignment; the dot pass does the multiply-adds it reports (counted
from its accumulators, every product 1), on each int8 dot the tier's kernels use."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hearth.kernels import native, tiers

DOT_CHAINS, DOTS = 12, 4  # csrc/peaks.h: accumulators, and dots per accumulator, a round
VECTOR_BYTES = {"amx": 64, "avx512": 64, "avx2": 32, "neon": 16}  # int8 products per dot instruction
RUNNABLE = [t.name for t in tiers.TIERS if t.native and tiers.why_not(t.name) is None]


@pytest.fixture(scope="module", params=RUNNABLE or [pytest.param(None, marks=pytest.mark.skip(
    reason="no native tier runs here (torch only)"))])
def lib(request):
    return request.param, native.open_tier(request.param)


@pytest.mark.parametrize("streams", [1, 3, 4, 16])
@pytest.mark.parametrize("lines,offset", [(1, 0), (7, 8), (1013, 32), (16384, 0)])
def test_the_read_pass_reads_every_byte_once(lib, streams, lines, offset):
    g = torch.Generator().manual_seed(lines)
    buf = torch.randint(0, 256, (64 * lines + offset,), dtype=torch.uint8, generator=g)[offset:]
    want = int(np.bitwise_xor.reduce(buf.numpy().view(np.uint64)))  # a line skipped or read twice changes it
    assert lib[1].hk_read_pass(buf.data_ptr(), buf.numel(), streams) == want


def test_the_dot_pass_counts_what_it_did(lib):
    tier, so = lib
    per_round = torch.get_num_threads() * DOT_CHAINS * DOTS * VECTOR_BYTES[tier]
    modes = [so.hk_avx_vnni(-1), 0] if tier == "avx2" else [None]  # AVX-VNNI where present, and the AVX2 pair
    try:
        for mode in modes:
            if mode is not None:
                so.hk_avx_vnni(mode)
            for rounds in (1, 1000, 1 << 22):  # the last past an int32 sum of the accumulators
                assert so.hk_int8_dot_pass(rounds) == rounds * per_round
    finally:
        if modes[0] is not None:
            so.hk_avx_vnni(modes[0])
