"""The real `hearth cluster serve` command, started as a user starts it (a subprocess that starts its own
local Ray instance): one start, every check against it, then the stop. The other cluster tests wire
the launcher and the app by hand inside pytest's process; this one covers the command itself: its
flags, Ray on loopback only, the front end's routes, and that a SIGTERM leaves no Ray process behind."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import openai
import psutil  # Ray vendors it (ray/thirdparty_files); accelerate requires it too
import pytest

from tests.cluster.conftest import API_KEY
from tests.cluster.test_cluster import metrics
from tests.server.conftest import wait_ready

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 300  # a shared 2-core machine can take seconds per step; no wait this long when it passes
START_TIMEOUT = 600  # Ray's start and two replicas loading SmolLM2 on a loaded machine
STOP_TIMEOUT = 60
ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": None, "RAY_AUTH_MODE": None, "RAY_ADDRESS": "127.0.0.1:1",
       "PYTHONUNBUFFERED": "1"}
"""The command's environment over the tests': tests/conftest.py sets Ray's loopback switch, which the
command must set itself; no RAY_AUTH_MODE (the command chooses it, and Ray says nothing of it); a
RAY_ADDRESS (nothing listens there) that a bare ray.init() would join."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(model: Path, port: int, log: Path, replicas: int = 2) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "hearth", "cluster", "serve", str(model), "--replicas", str(replicas),
           "--threads-per-replica", "1", "--port", str(port), "--api-key", API_KEY, "--served-model-name", "smol",
           "--max-model-len", "1024", "--max-num-seqs", "2", "--kv-cache-memory-gb", "0.25", "--log-level", "warning"]
    env = {k: v for k, v in {**os.environ, **ENV}.items() if v is not None}
    with open(log, "w") as out:  # its own process group, so that a failed stop can kill all of it
        return subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)


def _serve_checks(url: str) -> None:
    """Chat (whole and streamed), /v1/responses, /v1/models and /metrics through the command's front end."""
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=API_KEY, timeout=TIMEOUT, max_retries=0)
    messages = [{"role": "user", "content": "Name three colors."}]
    whole = client.chat.completions.create(model="smol", messages=messages, max_tokens=8, temperature=0)
    assert whole.choices[0].message.content and whole.usage.completion_tokens > 0
    chunks = list(client.chat.completions.create(model="smol", messages=messages, max_tokens=8, temperature=0,
                                                 stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    r = client.responses.create(model="smol", input="Say hello.", max_output_tokens=8, temperature=0)
    assert r.output_text and r.usage.output_tokens > 0 and r.status in ("completed", "incomplete")
    assert "smol" in [m.id for m in client.models.list().data]
    m = metrics(SimpleNamespace(url=url))
    assert {m[("hearth:replica_up", r)] for r in ("r0", "r1")} == {1.0}
    assert ("hearth:num_requests_running", "r1") in m  # engine series come once per replica
    assert sum(m[("hearth:replica_requests_routed_total", r)] for r in ("r0", "r1")) == 3
    with pytest.raises(openai.AuthenticationError):  # --api-key reached the front end
        openai.OpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0).models.list()


def _listening(procs: list[psutil.Process]) -> dict[str, set[str]]:
    """Process name -> the local addresses its TCP listening sockets and unconnected (receiving from
    anyone) UDP sockets are on."""
    names = {p.pid: p.name() for p in procs}
    out: dict[str, set[str]] = {}
    for c in psutil.net_connections(kind="inet"):
        receives = c.status == psutil.CONN_LISTEN or (c.type == socket.SOCK_DGRAM and not c.raddr)
        if c.pid in names and c.laddr and receives:
            out.setdefault(names[c.pid], set()).add(c.laddr.ip)
    return out


def _is_loopback(ip: str) -> bool:
    a = ipaddress.ip_address(ip.split("%")[0])
    return a.is_loopback or (a.version == 6 and a.ipv4_mapped is not None and a.ipv4_mapped.is_loopback)


def _stop(proc: subprocess.Popen) -> int | None:
    """SIGTERM to the command alone, as `kill` or `docker stop` send it. Its exit status, or None if it
    did not exit in time (then its process group is killed)."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _left(procs: list[psutil.Process]) -> list[str]:
    """The processes still running some seconds after the command exited (zombies count as gone)."""
    deadline = time.monotonic() + 15
    while True:
        alive = [p for p in procs if _alive(p)]
        if not alive or time.monotonic() > deadline:
            return [f"{p.pid} {p.name()}" for p in alive]
        time.sleep(0.5)


def test_cluster_serve_command(model_path, tmp_path):
    """SIGTERM (kill, docker stop) must end it as `hearth serve` ends: by that signal, after Ray is shut
    down. Ctrl-C takes the same path (KeyboardInterrupt, exit 130): checked by hand, one start kept."""
    port, log = _free_port(), tmp_path / "cluster.log"
    url = f"http://127.0.0.1:{port}"
    proc = _start(model_path("smollm2-135m"), port, log)
    ray_procs: list[psutil.Process] = []
    try:
        wait_ready(url, proc, log, START_TIMEOUT, "hearth cluster serve")
        _serve_checks(url)
        ray_procs = psutil.Process(proc.pid).children(recursive=True)  # the Ray instance it started
        names = {p.name() for p in ray_procs}
        assert {"gcs_server", "raylet"} <= names, names
        listening = _listening([psutil.Process(proc.pid), *ray_procs])
        assert {"gcs_server", "raylet"} <= set(listening), listening  # the check sees Ray's servers
        wide = {name: ips for name, ips in listening.items() if not all(map(_is_loopback, ips))}
        assert not wide, f"Ray listens beyond loopback: {wide}"
    finally:
        status = _stop(proc)
        left = _left(ray_procs)
        for p in filter(_alive, ray_procs):  # never leave a stray Ray behind, whatever failed
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
    output = log.read_text()
    assert status is not None, f"hearth cluster serve did not exit within {STOP_TIMEOUT}s of SIGTERM:\n{output}"
    assert not left, f"Ray processes outlived the command: {left}\n{output}"
    assert status == -signal.SIGTERM, f"exit status {status} after SIGTERM:\n{output}"
    assert "Traceback" not in output, output
    assert "Token authentication" not in output, output  # Ray's WARNING on every start, the mode left to it
