"""hearth's OpenMP wait policy: a short spin set before torch loads libgomp, a user's own setting kept,
nothing set where torch came first, and other engines' processes started without it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hearth import openmp

PROBE = "import sys, os, {first}; print('torch' in sys.modules, os.environ.get('GOMP_SPINCOUNT'))"


@pytest.mark.parametrize("first,given,want", [
    ("hearth", {}, f"False {openmp.SPIN_COUNT}"),  # set before torch is imported
    ("hearth", {"GOMP_SPINCOUNT": "50"}, "False 50"),
    ("hearth", {"OMP_WAIT_POLICY": "ACTIVE"}, "False None"),
    ("torch, hearth", {}, "True None"),  # libgomp has read its environment: setting it would only mislead
])
def test_the_spin_count_is_set_before_torch_loads_unless_the_user_chose(first, given, want):
    drop = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", openmp.MARK)
    env = {k: v for k, v in os.environ.items() if k not in drop} | given
    out = subprocess.run([sys.executable, "-c", PROBE.format(first=first)], env=env, capture_output=True, text=True,
                         check=True)
    assert out.stdout.split()[-2:] == want.split()


def test_other_engines_start_without_hearth_s_choice_but_keep_the_user_s():
    ours = {"GOMP_SPINCOUNT": openmp.SPIN_COUNT, openmp.MARK: "1", "LANG": "C"}
    assert openmp.peer_env(ours) == {"LANG": "C"}
    theirs = {"GOMP_SPINCOUNT": "50", "LANG": "C"}
    assert openmp.peer_env(theirs) == theirs
