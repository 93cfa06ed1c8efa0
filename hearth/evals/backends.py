"""The parent's side of the multi-turn tool backends: a child Python process
(hearth/evals/backend_child.py) that imports the backends extracted from the bfcl-eval wheel,
so their code never runs in the server's process. Requests time out; a child that hangs or dies
is replaced and the item fails with the reason."""

from __future__ import annotations

import ast
import json
import queue
import subprocess
import sys
import threading
from pathlib import Path

from hearth.errors import HearthError
from hearth.evals.bfcl_data import CLASSES, STATELESS

CHILD = Path(__file__).with_name("backend_child.py")
TIMEOUT = 30.0
"""Seconds one backend request may take."""


class BackendError(HearthError):
    pass


def parse_call(text: str) -> tuple[str, list, dict]:
    """A ground-truth call string `name(arg, key=value)` -> (name, args, kwargs); literals only."""
    try:
        node = ast.parse(text, mode="eval").body
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            raise ValueError("not a call of a plain name")
        return (node.func.id, [ast.literal_eval(a) for a in node.args],
                {k.arg: ast.literal_eval(k.value) for k in node.keywords})
    except (SyntaxError, ValueError) as e:
        raise BackendError(f"cannot read ground-truth call {text!r}: {e}") from None


class Backends:
    def __init__(self, site: Path, timeout: float = TIMEOUT):
        self.site, self.timeout = site, timeout
        self._proc: subprocess.Popen | None = None
        self._lines: queue.Queue = queue.Queue()

    def _start(self) -> None:
        # -I: no user site, no PYTHONPATH, no cwd on sys.path: only the stdlib, site-packages and site
        self._proc = subprocess.Popen([sys.executable, "-I", str(CHILD), str(self.site)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
        self._lines = queue.Queue()
        threading.Thread(target=self._pump, args=(self._proc, self._lines), daemon=True).start()

    @staticmethod
    def _pump(proc: subprocess.Popen, lines: queue.Queue) -> None:
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    def _ask(self, req: dict) -> dict:
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        try:
            self._proc.stdin.write(json.dumps(req) + "\n")
            self._proc.stdin.flush()
            line = self._lines.get(timeout=self.timeout)
        except (OSError, queue.Empty):
            line = None
        if line is None:
            self.close()
            raise BackendError(f"the tool backend process did not answer {req['op']} within {self.timeout:.0f} s")
        answer = json.loads(line)
        if "error" in answer:
            raise BackendError(f"tool backend: {answer['error']}")
        return answer

    def load(self, classes: list[str], config: dict) -> None:
        self._ask({"op": "load", "classes": {c: CLASSES[c][0] for c in classes}, "config": config,
                   "stateless": [c for c in classes if c in STATELESS]})

    def call(self, side: str, name: str, args: list | None = None, kwargs: dict | None = None) -> str:
        return self._ask({"op": "call", "side": side, "name": name, "args": args or [], "kwargs": kwargs or {}})["result"]

    def differences(self) -> dict:
        return self._ask({"op": "compare"})["differences"]

    def close(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None
