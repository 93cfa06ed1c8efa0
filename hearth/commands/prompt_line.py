"""The `>>>` prompt of `hearth run`: read one line from a terminal so that Ctrl-C always lands.

input() blocks in read(2) inside C: a SIGINT that arrives just before the read starts (or on another
thread) only sets Python's flag, and the read goes on waiting; the KeyboardInterrupt then surfaces
at the next bytecode, often inside a finalizer run by the garbage collector, which swallows it
("Exception ignored in ... __del__"). Here the wait is a select() on the terminal and on a
signal.set_wakeup_fd pipe, so a signal always wakes it and is raised right here."""

from __future__ import annotations

import codecs
import gc
import os
import select
import signal
import sys


class TerminalLines:
    """Lines typed on the terminal at fd (canonical mode: the tty delivers a line at a time, with its
    own editing keys). read() -> the line without its newline; EOFError on Ctrl-D at an empty line."""

    def __init__(self, fd: int = 0):
        self.fd, self.pending = fd, ""  # pending: text read past the first newline (a pasted block)
        self.decoder = codecs.getincrementaldecoder(sys.stdin.encoding or "utf-8")("replace")

    def read(self, prompt: str) -> str:
        gc.collect()  # the last turn's garbage: its finalizers run now, not while a signal lands
        sys.stderr.write(prompt)
        sys.stderr.flush()
        while "\n" not in self.pending:
            chunk = self._read_chunk()
            if not chunk:  # Ctrl-D: the text typed so far, else the end
                if self.pending:
                    break
                raise EOFError
            self.pending += self.decoder.decode(chunk)
        line, _, self.pending = self.pending.partition("\n")
        return line

    def _read_chunk(self) -> bytes:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        old = signal.set_wakeup_fd(wake_w)
        try:  # a SIGINT from here on writes to wake_w: the select returns and Python raises it
            while True:
                ready, _, _ = select.select([self.fd, wake_r], [], [])
                if self.fd in ready:
                    return os.read(self.fd, 4096)
                os.read(wake_r, 512)  # a signal whose handler did not raise (not SIGINT): wait on
        finally:
            signal.set_wakeup_fd(old)
            os.close(wake_r)
            os.close(wake_w)
