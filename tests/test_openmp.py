"""hearth's OpenMP wait policy: a short spin set before torch loads libgomp, a user's own setting kept."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = "import sys, os, hearth; print('torch' in sys.modules, os.environ.get('GOMP_SPINCOUNT'))"


@pytest.mark.parametrize("given,want", [
    ({}, "False 1000"),  # set before torch is imported
    ({"GOMP_SPINCOUNT": "50"}, "False 50"),
    ({"OMP_WAIT_POLICY": "ACTIVE"}, "False None"),
])
def test_the_spin_count_is_set_before_torch_loads_unless_the_user_chose(given, want):
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")} | given
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split()[-2:] == want.split()
