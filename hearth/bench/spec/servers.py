"""One server process at a time, on a free loopback port: started, waited on until /health
answers 200, and always stopped (its whole process group) when the `with` block ends, error or
not. Its output goes to a log file, shown in the error when it dies before it is ready."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from hearth.openmp import peer_env
from hearth.bench import BenchError

READY_TIMEOUT = 600.0
"""Seconds to wait for /health: loading a 1.5B model on a loaded 2-core machine takes a while."""
STOP_TIMEOUT = 15.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class Server:
    def __init__(self, command: list[str], port: int, log: Path, cwd: Path | None = None):
        self.command, self.port, self.log, self.cwd = command, port, log, cwd
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None
        self.ready_s = 0.0

    def __enter__(self) -> Server:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        with open(self.log, "wb") as out:  # the child keeps its own copy of the descriptor
            # a new session: stopping the group also stops anything the server started
            self.proc = subprocess.Popen(self.command, cwd=self.cwd, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True, env=peer_env())
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.ready_s = time.monotonic() - t0
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"{self.command[0]} exited with {self.proc.returncode} before it was ready "
                                 f"(log {self.log}):\n{_tail(self.log)}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:  # refused while starting; llama-server answers 503 while loading
                pass
            time.sleep(0.5)
        raise BenchError(f"{self.url} was not ready after {READY_TIMEOUT:.0f} s (log {self.log})")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, STOP_TIMEOUT), (signal.SIGKILL, STOP_TIMEOUT)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue
