"""The `>>>` prompt of `hearth run`: read one line from a terminal so that Ctrl-C always lands.

input() writes the prompt, then blocks in read(2) inside C. A SIGINT that arrives in between (the
user, or a script, answering the prompt at once; measured 1 in 8 with SmolLM2 on a busy machine)
only sets Python's flag: the read goes on waiting, the terminal shows ^C and nothing happens, and
the KeyboardInterrupt surfaces at the next bytecode, at exit inside the first finalizer
("Exception ignored in: NativeMatmul.__del__ ... KeyboardInterrupt"). Here the wait is a select()
on the terminal and on a signal.set_wakeup_fd pipe, so a signal at any moment wakes it and is
raised right here."""

from __future__ import annotations

import codecs
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
        sys.stderr.write(prompt)
        sys.stderr.flush()
        try:
            while "\n" not in self.pending:
                chunk = self._read_chunk()
                if not chunk:  # Ctrl-D: the text typed so far, else the end
                    if self.pending:
                        break
                    raise EOFError
                self.pending += self.decoder.decode(chunk)
        except KeyboardInterrupt:  # as the tty drops its unread input on ^C: text flushed by Ctrl-D too
            self.pending = ""
            self.decoder.reset()
            raise
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
