"""Whose turn it is to step the LLM's engine: one call at a time (each steps it until its own requests end,
and would take and drop another thread's outputs on the way), and none after close()."""

from __future__ import annotations

import threading
from contextlib import contextmanager

from hearth.errors import HearthError


class LLMClosedError(HearthError):
    """A call that would run the engine after LLM.close()."""


class EngineTurns:
    def __init__(self):
        self._lock = threading.Lock()
        """Held by the call that steps the engine: each steps it until its own requests end, and would
        take (and drop) another thread's outputs on the way."""
        self._holder: int | None = None  # the thread that holds _lock (an open stream's may call again)
        self.closed = False

    @contextmanager
    def driving(self, call: str, closing: bool = False):
        """Run the engine for one call: after any other thread's call, never after close() (closing:
        the call is close(), which may come twice)."""
        if self._holder == threading.get_ident():  # a plain Lock would wait for itself forever
            raise RuntimeError(f"LLM.{call}: a stream of this LLM is still open in this thread: "
                               "exhaust or close() it first")
        with self._lock:
            if self.closed and not closing:
                raise LLMClosedError(f"LLM.{call}: this LLM is closed (LLM.close() was called): load a new LLM")
            self._holder = threading.get_ident()
            try:
                yield
            finally:
                self._holder = None
