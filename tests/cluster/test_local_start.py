"""A local instance (no --address) starts with hearth's lines only: Ray's token authentication is chosen
by hearth (hearth.cluster.launch.use_token_auth), so Ray no longer writes "Token authentication is enabled
for this Ray cluster" on every start, and the driver sends the token its GCS wants whether Ray was
imported before hearth set the mode (as the tests import it at collection) or after (as the CLI does)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

START = """
if {early}:
    import ray  # before hearth sets anything, as this package's conftest imports it at collection
import ray
from hearth.cluster.launch import connect
assert connect(None, num_cpus=1, log_to_driver=False)
try:
    print("answer", ray.get(ray.remote(lambda: 41 + 1).remote(), timeout=120))
finally:
    ray.shutdown()
"""


@pytest.mark.parametrize("early", [False, True], ids=["ray-imported-by-hearth", "ray-imported-first"])
def test_a_local_start_says_nothing_of_token_authentication_and_uses_it(early):
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}  # a user's shell: Ray's default
    r = subprocess.run([sys.executable, "-c", START.format(early=early)], capture_output=True, text=True, timeout=300, env=env,
                       cwd=Path(__file__).resolve().parents[2])
    assert r.returncode == 0 and "answer 42" in r.stdout, r.stderr[-3000:]
    assert "Token authentication" not in r.stderr, r.stderr
