"""`hearth cluster serve` refuses, in one line and before any front end starts: no Ray installed, an
unreachable Ray address, bad settings. (More replicas than the cluster can place and a model a replica
cannot load need the running cluster: tests/cluster/test_cluster.py, the one module using that fixture.)"""

from __future__ import annotations

import http.server
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from hearth.cli import main
from hearth.cluster.probe import PREFACE
from tests.cluster.conftest import one_error_line as _one_error_line
from tests.gguf_factory import write_tiny_gguf

REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hearth", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def test_without_ray_one_line_names_the_extra(model_path):
    code = ("import sys; sys.modules['ray'] = None; from hearth.cli import main; "
            f"sys.exit(main(['cluster', 'serve', {str(model_path('smollm2-135m'))!r}]))")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "pip install -c constraints.txt '.[cluster]'" in _one_error_line(r.stderr)  # the README's


def test_unreachable_ray_address(model_path):
    r = _cli("cluster", "serve", str(model_path("smollm2-135m")), "--address", "127.0.0.1:1")
    assert r.returncode == 1
    assert "cannot reach a Ray cluster at 127.0.0.1:1" in _one_error_line(r.stderr)
    r = _cli("cluster", "serve", str(model_path("smollm2-135m")), "--address", "no-port-here")
    assert r.returncode == 1 and "HOST:PORT" in _one_error_line(r.stderr)


RAY_LOG_LINE = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+ [DIWEF] \d+ \d+\] \w+\.(cc|h):\d+:")
"""Ray's C++ logging: `[2026-12-08 00:19:44,467 W 14692 14692] rpc_client.h:153: Failed to connect to GCS ...`"""


class _Quiet(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_not_a_ray_head_is_one_line_without_rays_log(tmp_path):
    """A closed port, and a plain HTTP server: ray.init would retry for minutes, writing its C++ client's
    warnings and no error; hearth asks first and says what to give --address."""
    write_tiny_gguf(tiny := tmp_path / "tiny.gguf", "llama")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    try:
        for port, needle in ((closed, f"cannot reach a Ray cluster at 127.0.0.1:{closed}: Connection refused"),
                             (web.server_address[1], f"127.0.0.1:{web.server_address[1]} is not a Ray cluster")):
            r = _cli("cluster", "serve", str(tiny), "--address", f"127.0.0.1:{port}", timeout=60)
            assert r.returncode == 1
            line = _one_error_line(r.stderr)
            assert needle in line and "ray start --head" in line and "leave out --address" in line, line
            assert not any(RAY_LOG_LINE.match(x) for x in r.stderr.splitlines()), r.stderr
            assert r.stderr.strip() == line, r.stderr  # nothing but hearth's line
    finally:
        web.shutdown()
        web.server_close()


def test_bad_settings_fail_before_ray_starts(capsys, tmp_path):
    for argv, needle in ((["--replicas", "0"], "--replicas must be at least 1, not 0"),
                         (["--threads", "2"], "use --threads-per-replica"),
                         (["--load-factor", "0.5"], "--load-factor must be at least 1"),
                         (["--routing", "prefix", "--prefix-blocks", "0"], "--prefix-blocks must be at least 1"),
                         (["--lora", "adapter.gguf"], "takes no LoRA adapters yet"),
                         (["--keep-alive", "5m"], "keeps its replicas loaded (no --keep-alive)"),
                         (["--mmproj", "mmproj.gguf"], "takes no images yet (--mmproj)"),
                         (["--pooling", "mean"], "takes no --pooling yet"),
                         # 0 started Ray, then gave up on the replicas at once
                         (["--startup-timeout", "0"], "--startup-timeout must be a positive number of seconds, "
                                                      "not 0"),
                         (["--startup-timeout", "-5"], "--startup-timeout must be a positive number of seconds, "
                                                       "not -5"),
                         (["--startup-timeout", "nan"], "--startup-timeout must be a positive number of seconds")):
        assert main(["cluster", "serve", str(tmp_path / "never-read.gguf"), *argv]) == 1
        assert needle in _one_error_line(capsys.readouterr().err)


def test_one_model_only():
    """Replicas serve one model: several MODELs or a --models file is one line, before Ray starts."""
    for args in (["a.gguf", "b.gguf"], ["--models", "models.toml"]):
        r = _cli("cluster", "serve", *args)
        assert r.returncode == 1
        assert "runs replicas of one model: give one MODEL, no --models" in _one_error_line(r.stderr)


def test_a_port_in_use_is_one_line_before_ray_starts(tmp_path, capsys, monkeypatch):
    import socket

    import hearth.cluster.launch as launch

    for name in ("connect", "start_replicas"):
        monkeypatch.setattr(launch, name, lambda *a, **k: pytest.fail("started Ray or a replica for a port in use"))
    write_tiny_gguf(tiny := tmp_path / "tiny.gguf", "llama")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["cluster", "serve", str(tiny), "--host", "127.0.0.1", "--port", str(port)]) == 1
    assert _one_error_line(capsys.readouterr().err) == f"hearth: error: port {port} on 127.0.0.1 is already in use"


def test_more_replicas_than_this_machine_has_cpus_is_one_line_before_ray_starts(tmp_path, capsys, monkeypatch):
    """A local instance gets this process's CPUs: replicas x threads beyond them would wait in Ray's queue
    forever, so the command says so (and what to give) before Ray starts."""
    import ray

    import hearth.cluster.launch as launch

    for name in ("connect", "start_replicas"):
        monkeypatch.setattr(launch, name, lambda *a, **k: pytest.fail("started Ray or a replica that cannot fit"))
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a fresh command (the package's cluster may run)
    monkeypatch.setattr(launch, "machine_cpus", lambda: 4)
    write_tiny_gguf(tiny := tmp_path / "tiny.gguf", "llama")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    for argv, expected in (
            (["--replicas", "3", "--threads-per-replica", "2"],
             "3 replicas x 2 threads need 6 CPUs, more than the 4 this process may use (each replica holds its "
             "threads' CPUs): give --replicas 2 or fewer at --threads-per-replica 2, or join a Ray cluster with "
             "more CPUs (--address)"),
            (["--replicas", "1", "--threads-per-replica", "5"],
             "--threads-per-replica 5 is more than the 4 CPUs this process may use: give at most 4, or join a Ray "
             "cluster with bigger nodes (--address)")):
        assert main(["cluster", "serve", str(tiny), "--port", port, *argv]) == 1
        assert _one_error_line(capsys.readouterr().err) == f"hearth: error: {expected}"


def _grpc_lookalike() -> socket.socket:
    """A loopback server that answers HTTP/2's preface with SETTINGS, as a gRPC server does (so the probe
    passes), and then never answers a call: Ray's GCS client gets no cluster ID from it."""
    server = socket.create_server(("127.0.0.1", 0))

    def hold(conn: socket.socket):
        with conn:
            conn.recv(len(PREFACE), socket.MSG_WAITALL)
            conn.sendall(bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))  # an empty SETTINGS frame
            while conn.recv(65536):
                pass

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:  # closed by the test
                return
            threading.Thread(target=hold, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return server


def test_a_grpc_server_that_is_not_rays_is_one_line_in_bounded_time(tmp_path):
    """Past the probe, ray.init made 20 tries of its GCS client, each waiting ~35 s for a cluster ID
    (~12 minutes); hearth lets it make one, then says which address failed."""
    write_tiny_gguf(tiny := tmp_path / "tiny.gguf", "llama")
    with socket.socket() as s:  # a free port for the front end, which must never start
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with _grpc_lookalike() as server:
        address = f"127.0.0.1:{server.getsockname()[1]}"
        r = _cli("cluster", "serve", str(tiny), "--address", address, "--port", str(port), timeout=240)
    assert r.returncode == 1
    assert f"cannot join the Ray cluster at {address}: " in _one_error_line(r.stderr)
