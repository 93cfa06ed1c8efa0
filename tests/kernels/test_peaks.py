"""The roofline's passes (csrc/peaks.h) of the selected tier's library, which `hearth plan` times for
this machine's ceilings (hearth.memory.bandwidth): the read pass reads every byte exactly once, in
any number of interleaved runs and threads, at any size; the dot pass does the multiply-adds it
reports (counted from its accumulators, every product 1), on each int8 dot the tier's kernels use."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hearth.kernels import native

pytestmark = pytest.mark.skipif(not native.has("peaks"), reason="the torch tier runs no C++ kernels")

DOT_CHAINS, DOTS = 12, 4  # csrc/peaks.h: accumulators, and dots per accumulator, a round
VECTOR_BYTES = {"amx": 64, "avx512": 64, "avx2": 32, "neon": 16}  # int8 products per dot instruction


@pytest.mark.parametrize("streams", [1, 3, 4, 16])
@pytest.mark.parametrize("lines", [1, 7, 1013, 16384])
def test_the_read_pass_reads_every_byte_once(streams, lines):
    buf = torch.randint(0, 256, (64 * lines,), dtype=torch.uint8, generator=torch.Generator().manual_seed(lines))
    want = int(np.bitwise_xor.reduce(buf.numpy().view(np.uint64)))  # a line skipped or read twice changes it
    assert native.lib().hk_read_pass(buf.data_ptr(), buf.numel(), streams) == want


def test_the_dot_pass_counts_what_it_did():
    lib, tier = native.lib(), native.loaded_tier.name
    per_round = torch.get_num_threads() * DOT_CHAINS * DOTS * VECTOR_BYTES[tier]
    modes = [lib.hk_avx_vnni(-1), 0] if native.has("many_rows") else [None]  # avx2: AVX-VNNI and the AVX2 pair
    try:
        for mode in modes:
            if mode is not None:
                lib.hk_avx_vnni(mode)
            for rounds in (1, 1000):
                assert lib.hk_int8_dot_pass(rounds) == rounds * per_round
    finally:
        if modes[0] is not None:
            lib.hk_avx_vnni(modes[0])
