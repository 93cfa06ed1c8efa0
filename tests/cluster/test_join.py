"""`--address` joins a head started the usual way (`ray start --head`, token authentication on by
default): the driver must send the head's token. Given a loopback address it joins a head on every
interface and one that listens on loopback only (started with Ray's loopback switch at 0): for the latter,
Ray left to itself dialed this machine's network address instead, refused, and retried for ~12 minutes."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

RAY = Path(sys.executable).with_name("ray")
JOIN = ("from hearth.cluster.launch import connect; assert connect({address!r}, log_to_driver=False) is False; "
        "import ray; print('cpus', ray.cluster_resources()['CPU'], 'task', ray.get(ray.remote(lambda: 42).remote()))")
"""Ray imported by connect, as by the CLI; a task run on the head's node."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # tests/conftest.py sets it 0 for the whole run


@pytest.mark.parametrize("head_switch", [None, "0"], ids=["head-on-every-interface", "head-on-loopback-only"])
def test_joins_a_head_started_with_ray_start(head_switch):
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != LOOPBACK_SWITCH}  # the driver's: a user's shell
    head_env = env if head_switch is None else {**env, LOOPBACK_SWITCH: head_switch}
    # its own session folder, short enough for Ray's unix sockets (pytest's tmp_path is not)
    temp = tempfile.mkdtemp(prefix="ray")
    # --block, in its own process group: killing the group ends this head and its servers only (never
    # `ray stop`, which would also stop the package's local instance; SIGTERM drains for 30 s)
    head = subprocess.Popen([str(RAY), "start", "--head", "--block", f"--port={port}", "--num-cpus=1",
                             "--include-dashboard=false", f"--temp-dir={temp}", "--disable-usage-stats",
                             "--node-ip-address=127.0.0.1"], env=head_env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while True:  # the head's port opens once its GCS is up
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert head.poll() is None and time.monotonic() < deadline, "ray start --head did not come up"
                time.sleep(0.5)
        r = subprocess.run([sys.executable, "-c", JOIN.format(address=f"127.0.0.1:{port}")], capture_output=True,
                           text=True, timeout=120, cwd=Path(__file__).resolve().parents[2], env=env)
        assert r.returncode == 0 and "cpus 1.0 task 42" in r.stdout, r.stderr[-2000:]
    finally:
        os.killpg(head.pid, signal.SIGKILL)
        head.wait(timeout=60)
        shutil.rmtree(temp, ignore_errors=True)
