"""The kernel libraries' sources (hearth/kernels/csrc), read as text: what every library shares is
written once, in a header each includes (no compiler needed)."""

from __future__ import annotations

import re

import pytest

from hearth.kernels.native import LIBRARIES, sources


@pytest.mark.parametrize("tier", sorted(LIBRARIES))
def test_the_layer_struct_is_one_header_every_library_includes(tier):
    """hk_layer_new's Layer was written out twice, in fused_layer.h (AVX-512) and decode_library.h
    (avx2, neon): a field added to one library's could silently miss the other's."""
    defining = [f.name for f in sources(LIBRARIES[tier]) if re.search(r"^struct Layer\b", f.read_text(), re.M)]
    assert defining == ["layer.h"]


@pytest.mark.parametrize("tier", sorted(LIBRARIES))
def test_every_library_builds_the_delta_net_from_one_source(tier):
    """hk_delta_net (qwen35's Gated DeltaNet mixer) is plain C++ in delta_net.h, which every tier's library
    compiles with its own flags: one definition, none per tier."""
    defining = [f.name for f in sources(LIBRARIES[tier]) if re.search(r"^int hk_delta_net\(", f.read_text(), re.M)]
    assert defining == ["delta_net.h"] and "delta_net" in LIBRARIES[tier].provides
