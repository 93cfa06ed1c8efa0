"""Ctrl-C on `hearth cluster serve` ends as on `hearth serve` (tests/server/test_serve_shutdown.py): an
answer streaming ends at once with an error event and [DONE] (never a cut or hanging stream), the
command exits 130 with no traceback, and the local Ray instance it started is gone. One replica a start
(before: the stream waited uvicorn's 5 s graceful timeout, then was cut with a CancelledError
traceback, no error event and no [DONE]).
The first test sends the SIGINT to the command alone, the second as a terminal does, to the whole process
group. Ctrl-C with no stream open takes the same way out less the stream's end: until 2026-12-06 a third
start checked it (the same exit, nothing left), ~20 s of CI's time for a path these two run whole."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil  # Ray vendors it (ray/thirdparty_files)

from tests.cluster.conftest import API_KEY
from tests.cluster.test_cluster_serve_command import _alive, _free_port, _left, _start
from tests.server.conftest import wait_ready
from tests.server.test_serve_shutdown import _stream

START_TIMEOUT = 600  # Ray's start and a replica loading SmolLM2 on a loaded machine
LONG = {"model": "smol", "max_tokens": 900, "ignore_eos": True, "stream": True,
        "messages": [{"role": "user", "content": "count"}]}


@dataclass
class Interrupted:
    """How a `hearth cluster serve` interrupted mid-stream ended."""
    code: int
    """Its exit status (it must exit within a minute: proc.wait raises otherwise)."""
    took: float
    """Seconds from the signal to its exit."""
    lines: list[str]
    """The open stream's lines, blank ones left out."""
    log: str
    """Its output."""
    left: list[str]
    """Its processes (the Ray instance it started, its process group) still running after it exited."""


def _interrupt(model: str, tmp_path, send: Callable[[subprocess.Popen], None]) -> Interrupted:
    """Start the command with one replica, open a long stream and wait for its first deltas, then
    `send(proc)` the Ctrl-C; whatever fails, nothing of the command or its Ray is left running."""
    port, log = _free_port(), tmp_path / "cluster.log"
    url = f"http://127.0.0.1:{port}"
    proc = _start(model, port, log, replicas=1)
    ray_procs: list[psutil.Process] = []
    code = took = None
    started, lines = threading.Event(), []
    try:
        wait_ready(url, proc, log, START_TIMEOUT, "hearth cluster serve")
        ray_procs = psutil.Process(proc.pid).children(recursive=True)
        thread = threading.Thread(target=_stream, args=(url, started, lines, LONG, API_KEY), daemon=True)
        thread.start()
        deadline = time.monotonic() + 120
        while not started.wait(0.2):  # 4 deltas have come
            assert thread.is_alive() and time.monotonic() < deadline, lines
        send(proc)
        t0 = time.monotonic()
        code = proc.wait(60)
        took = time.monotonic() - t0
        thread.join(20)
        assert not thread.is_alive(), "the stream hangs after Ctrl-C"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(Exception):
                proc.wait(60)
        left = _left(ray_procs + _group(proc.pid))
        for p in filter(_alive, ray_procs + _group(proc.pid)):  # never leave a stray Ray behind, whatever failed
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
    return Interrupted(code, took, [x for x in lines if x], log.read_text(), left)


def _assert_ended_as_serve_ends(end: Interrupted) -> None:
    """Nothing left, exit 130 (a Ctrl-C, as `hearth serve` exits) at once with no traceback, and the
    stream ended by the server_shutting_down error event and [DONE]: never a hang or a silent cut."""
    assert not end.left, f"processes outlived the command: {end.left}\n{end.log}"
    assert end.code == 130 and end.took < 15, (end.code, end.took, end.log)
    assert "Traceback" not in end.log and "CancelledError" not in end.log and "timeout graceful" not in end.log, end.log
    assert end.lines[-1] == "data: [DONE]", end.lines[-3:]
    error = json.loads(end.lines[-2].removeprefix("data: ")).get("error")
    assert error is not None and error["code"] == "server_shutting_down", end.lines[-2]
    assert error["message"] == "the server is shutting down"


def _group(pgid: int) -> list[psutil.Process]:
    """Every live process of process group pgid: a terminal's Ctrl-C reaches each of them."""
    found = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if os.getpgid(p.pid) == pgid and _alive(p):
                found.append(p)
    return found


def test_ctrl_c_ends_cluster_streams_with_an_error_event_and_shuts_ray_down(model_path, tmp_path):
    end = _interrupt(model_path("smollm2-135m"), tmp_path, lambda proc: proc.send_signal(signal.SIGINT))
    _assert_ended_as_serve_ends(end)  # the command alone was signalled: Ray's processes are for it to stop


def test_ctrl_c_in_a_terminal_reaches_the_whole_process_group(model_path, tmp_path):
    """A terminal's Ctrl-C sends SIGINT to the whole foreground group at once: the front end and the
    Ray processes it started in its group (gcs_server, raylet, the dashboard and runtime-env agents,
    Ray's Python helpers), which may die before the front end's shutdown reaches them. Ray starts its
    workers (ray::Replica, ray::IDLE) in sessions of their own: Ray stops those. The same end as the
    command alone signalled. Measured 2026-12-06: exit in 2.2-3.0 s, 4 runs of 4."""
    def terminal(proc: subprocess.Popen) -> None:
        in_group = {p.name() for p in _group(proc.pid)}
        assert {"gcs_server", "raylet"} <= in_group, in_group  # the signal reaches Ray's own processes
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal does (the command leads its group)

    _assert_ended_as_serve_ends(_interrupt(model_path("smollm2-135m"), tmp_path, terminal))
