"""`hearth run` at its `>>>` prompt on a real terminal (a pty): Ctrl-C lands every time."""

import fcntl
import os
import select
import subprocess
import sys
import termios
import time

import pytest

from tests.test_cli import GREEDY, TEMPLATE

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="a POSIX pty")


@pytest.fixture(scope="module")
def instruct(tmp_path_factory):
    from tests.gguf_factory import write_tiny_gguf

    path = tmp_path_factory.mktemp("pty") / "instruct.gguf"
    write_tiny_gguf(path, "llama", chat_template=TEMPLATE)
    return path


def _controlling_tty():  # in the child: a session of its own whose terminal is the pty, so ^C is its SIGINT
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Screen:
    """What the pty showed; expect() finds each token after the last one found (a chunk may hold several)."""

    def __init__(self, fd: int):
        self.fd, self.seen, self.pos = fd, bytearray(), 0

    def expect(self, token: bytes, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while (at := self.seen.find(token, self.pos)) < 0:
            if time.monotonic() > end:
                return False
            if select.select([self.fd], [], [], 0.05)[0]:
                try:
                    self.seen += os.read(self.fd, 4096)
                except OSError:  # the child closed the terminal
                    return False
        self.pos = at + len(token)
        return True

    def __repr__(self) -> str:  # an assertion's message: what the terminal showed
        return self.seen.decode(errors="replace")


def test_ctrl_c_at_the_prompt_gives_a_fresh_prompt_every_time(instruct):
    """As ollama: ^C at `>>>` says how to exit and prompts again; ^D then ends with 0. Before, a
    SIGINT that landed between the prompt and input()'s read(2) left it waiting (1 in 8 here)."""
    main, sub = os.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "hearth", "run", str(instruct), *GREEDY],
                            stdin=sub, stdout=sub, stderr=sub, preexec_fn=_controlling_tty, close_fds=True)
    os.close(sub)
    screen = Screen(main)
    try:
        assert screen.expect(b">>> ", 120), screen
        for turn in range(5):
            if turn % 2 == 0:  # after an answer too
                os.write(main, b"hello there\r")
                assert screen.expect(b">>> ", 30), (proc.poll(), str(screen))
            os.write(main, b"\x03")  # at once, as a prompt's first keystroke may
            # failed once under load ~8 (not reproduced): the message says whether the line came late or never
            assert screen.expect(b"Use Ctrl + d or /bye to exit.", 10), (
                f"came later: {screen.expect(b'Use Ctrl + d or /bye to exit.', 30)}, exit {proc.poll()}", screen)
            assert screen.expect(b">>> ", 10), screen
        os.write(main, b"\x04")
        assert proc.wait(30) == 0
        assert b"Exception ignored" not in screen.seen and b"Traceback" not in screen.seen
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(main)


def test_ctrl_c_drops_the_text_typed_and_flushed_with_ctrl_d():
    """Ctrl-D mid-line hands 'abc' over without a newline; a Ctrl-C then drops it, as the tty drops
    its own unread input: the next line is 'def', not 'abcdef'."""
    import signal
    import threading

    from hearth.commands.prompt_line import TerminalLines

    main, sub = os.openpty()
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        lines = TerminalLines(sub)
        os.write(main, "abc\x04".encode())
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()  # once 'abc' is pending
        with pytest.raises(KeyboardInterrupt):
            lines.read(">>> ")
        os.write(main, b"def\n")
        assert lines.read(">>> ") == "def"
    finally:
        signal.signal(signal.SIGINT, old)
        os.close(main)
        os.close(sub)
