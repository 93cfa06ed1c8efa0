"""One local Ray instance for the whole package (3 logical CPUs: two SmolLM2 replicas with one
thread each, and one CPU left for the bad-input tests), with the cluster's HTTP front end run by
uvicorn on a thread on a free loopback port. Everything is torn down in finally blocks."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass

import pytest
import ray
import uvicorn

from hearth.api.app import ServerConfig
from hearth.cluster.launch import ClusterSpec, connect, scaler_for, start_replicas
from hearth.cluster.remote_engine import ClusterEngine
from hearth.commands.cluster import build_app

API_KEY = "cluster-key"
ENGINE_ARGS = dict(max_model_len=2048, max_num_seqs=2, kv_cache_memory_gb=0.25, kv_disk_space_mb=64)


@dataclass
class Cluster:
    url: str
    engine: ClusterEngine
    model: str
    path: str


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="package")
def cluster(model_path, tmp_path_factory):
    path = str(model_path("smollm2-135m"))
    disk = str(tmp_path_factory.mktemp("shared-kv"))  # one disk tier for both replicas
    assert connect(None, num_cpus=3, log_to_driver=False), "another test left Ray running in this process"
    server = thread = None
    try:
        spec = ClusterSpec(path, replicas=2, threads_per_replica=1, engine_args={**ENGINE_ARGS, "kv_disk_dir": disk}, max_queued=8,
                           startup_timeout_s=600)
        engine = start_replicas(spec)
        app = build_app(path, ["smol"], engine, ServerConfig(api_key=API_KEY), scaler_for(spec, engine))
        port = _free_port()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                               timeout_graceful_shutdown=5))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 60
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the front end did not start"
            time.sleep(0.05)
        yield Cluster(f"http://127.0.0.1:{port}", engine, "smol", path)
    finally:
        if server is not None:
            server.should_exit = True
            thread.join(timeout=60)
        ray.shutdown()


def one_error_line(stderr: str) -> str:
    """The one `hearth: error:` line of a refused command (no traceback, nothing served)."""
    lines = [line for line in stderr.splitlines() if line.startswith("hearth: error:")]
    assert len(lines) == 1 and "Traceback" not in stderr and "serving" not in stderr, stderr
    return lines[0]
