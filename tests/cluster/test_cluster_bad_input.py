"""`hearth cluster serve` refuses, in one line and before any front end starts: no Ray installed, an
unreachable Ray address, more replicas than the cluster can place, a model a replica cannot load."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray

from hearth.cli import main
from tests.gguf_factory import write_header_only_gguf, write_tiny_gguf

REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hearth", *args], cwd=REPO, capture_output=True, text=True, timeout=120)


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("hearth: error:")]
    assert len(lines) == 1 and "Traceback" not in stderr and "serving" not in stderr, stderr
    return lines[0]


def test_without_ray_one_line_names_the_extra(model_path):
    code = ("import sys; sys.modules['ray'] = None; from hearth.cli import main; "
            f"sys.exit(main(['cluster', 'serve', {str(model_path('smollm2-135m'))!r}]))")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "pip install 'hearth[cluster]'" in _one_error_line(r.stderr)


def test_unreachable_ray_address(model_path):
    r = _cli("cluster", "serve", str(model_path("smollm2-135m")), "--address", "127.0.0.1:1")
    assert r.returncode == 1
    assert "cannot reach a Ray cluster at 127.0.0.1:1" in _one_error_line(r.stderr)
    r = _cli("cluster", "serve", str(model_path("smollm2-135m")), "--address", "no-port-here")
    assert r.returncode == 1 and "HOST:PORT" in _one_error_line(r.stderr)


def _free_cpus() -> float:
    return ray.available_resources().get("CPU", 0)


def test_more_replicas_than_the_cluster_can_place(cluster, capsys):
    assert _free_cpus() == 1  # 3 logical CPUs, 2 held by the serving replicas
    assert main(["cluster", "serve", cluster.path, "--replicas", "2"]) == 1
    line = _one_error_line(capsys.readouterr().err)
    assert "2 replicas x 1 threads need 2 CPUs; the Ray cluster has 1 free of 3" in line


def test_a_model_a_replica_cannot_load(cluster, tmp_path, capsys):
    bad = tmp_path / "bad.gguf"
    write_header_only_gguf(bad, "nosucharch")
    assert main(["cluster", "serve", str(bad), "--replicas", "1"]) == 1
    line = _one_error_line(capsys.readouterr().err)
    assert "replica r0 could not load the model: " in line and "bad.gguf: tokenizer model" in line
    deadline = time.monotonic() + 60  # the failed replica's actor is killed, its CPU freed
    while _free_cpus() < 1:
        assert time.monotonic() < deadline, ray.available_resources()
        time.sleep(0.1)


def test_bad_settings_fail_before_ray_starts(capsys, tmp_path):
    for argv, needle in ((["--replicas", "0"], "--replicas must be at least 1, not 0"),
                         (["--threads", "2"], "use --threads-per-replica"),
                         (["--load-factor", "0.5"], "--load-factor must be at least 1"),
                         (["--routing", "prefix", "--prefix-blocks", "0"], "--prefix-blocks must be at least 1")):
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
