"""The C++ kernels build and load wherever the chosen tier needs them: every native test skips when
they do not, so a build broken on a machine that should run them would otherwise pass unnoticed."""

from __future__ import annotations

import shutil

import pytest

from hearth.kernels import native, tiers

TIER = tiers.selected()


@pytest.mark.skipif(not (TIER.native and shutil.which("g++")), reason=f"the {TIER.name} tier runs no C++ kernels")
def test_kernels_build_and_load_here():
    assert native.available()
    assert tiers.active() == TIER.name


def test_the_library_obeys_the_tier():
    """AMX tiles run exactly on the amx tier: a lower tier forced on an AMX CPU keeps them off in C++ too."""
    assert native.bf16_tiles() == (tiers.active() == "amx")
