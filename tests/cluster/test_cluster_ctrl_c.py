"""Ctrl-C on `hearth cluster serve` ends as on `hearth serve` (tests/server/test_serve_shutdown.py): an
answer streaming ends at once with an error event and [DONE] (never a cut or hanging stream), the
command exits 130 with no traceback, and the local Ray instance it started is gone; idle, the same exit.
One replica a start (before: the stream waited uvicorn's 5 s graceful timeout, then was cut with a
CancelledError traceback, no error event and no [DONE])."""

from __future__ import annotations

import contextlib
import json

import pytest
import signal
import threading
import time

import psutil  # Ray vendors it (ray/thirdparty_files)

from tests.cluster.conftest import API_KEY
from tests.cluster.test_cluster_serve_command import _alive, _free_port, _left, _start
from tests.server.conftest import wait_ready
from tests.server.test_serve_shutdown import _stream

START_TIMEOUT = 600  # Ray's start and a replica loading SmolLM2 on a loaded machine
LONG = {"model": "smol", "max_tokens": 900, "ignore_eos": True, "stream": True,
        "messages": [{"role": "user", "content": "count"}]}


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "idle"])
def test_ctrl_c_ends_cluster_streams_with_an_error_event_and_shuts_ray_down(model_path, tmp_path, streaming):
    port, log = _free_port(), tmp_path / "cluster.log"
    url = f"http://127.0.0.1:{port}"
    proc = _start(model_path("smollm2-135m"), port, log, replicas=1)
    ray_procs: list[psutil.Process] = []
    code = took = None
    started, lines = threading.Event(), []
    try:
        wait_ready(url, proc, log, START_TIMEOUT, "hearth cluster serve")
        ray_procs = psutil.Process(proc.pid).children(recursive=True)
        thread = threading.Thread(target=_stream, args=(url, started, lines, LONG, API_KEY), daemon=True)
        if streaming:
            thread.start()
        deadline = time.monotonic() + 120
        while streaming and not started.wait(0.2):  # 4 deltas have come
            assert thread.is_alive() and time.monotonic() < deadline, lines
        proc.send_signal(signal.SIGINT)  # the command alone: Ray's processes are for it to stop
        t0 = time.monotonic()
        code = proc.wait(60)
        took = time.monotonic() - t0
        if streaming:
            thread.join(20)
            assert not thread.is_alive(), "the stream hangs after Ctrl-C"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(Exception):
                proc.wait(60)
        left = _left(ray_procs)
        for p in filter(_alive, ray_procs):  # never leave a stray Ray behind, whatever failed
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
    text = log.read_text()
    assert not left, f"Ray processes outlived the command: {left}\n{text}"
    assert code == 130 and took < 15, (code, took, text)  # 130: a Ctrl-C, as `hearth serve` exits
    assert "Traceback" not in text and "CancelledError" not in text and "timeout graceful" not in text, text
    if not streaming:
        return
    lines = [x for x in lines if x]
    assert lines[-1] == "data: [DONE]", lines[-3:]
    error = json.loads(lines[-2].removeprefix("data: "))["error"]
    assert error["code"] == "server_shutting_down" and error["message"] == "the server is shutting down"
