"""The C++ kernels build and load wherever they can: every native test skips when they do not, so a
build broken on a machine that should run them would otherwise pass unnoticed."""

from __future__ import annotations

import platform
import shutil
import sys

import pytest

from hearth.kernels import native

CAN_BUILD = (sys.platform.startswith("linux") and platform.machine() == "x86_64" and shutil.which("g++") is not None
             and {"avx512f", "avx512bw", "avx512vl", "avx512_vnni", "f16c", "fma", "bmi2"} <= native._cpu_flags())


@pytest.mark.skipif(not CAN_BUILD, reason="no g++ or no AVX-512 VNNI here: the torch paths run instead")
def test_kernels_build_and_load_here(monkeypatch):
    monkeypatch.delenv("HEARTH_NATIVE", raising=False)
    assert native.available()
    if {"amx_bf16", "amx_tile", "avx512_bf16"} <= native._cpu_flags():
        assert native.bf16_tiles()  # the prefill's tile path
