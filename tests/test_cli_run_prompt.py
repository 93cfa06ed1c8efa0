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


def _read_until(fd: int, token: bytes, seen: bytearray, timeout: float) -> bool:
    """Read the pty into `seen` until `token` shows up after what was seen before (True) or timeout."""
    start, end = len(seen), time.monotonic() + timeout
    while time.monotonic() < end:
        if select.select([fd], [], [], 0.05)[0]:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                return False
            seen += chunk
            if token in seen[start:]:
                return True
    return False


def test_ctrl_c_at_the_prompt_gives_a_fresh_prompt_every_time(instruct):
    """As ollama: ^C at `>>>` says how to exit and prompts again; ^D then ends with 0. Before, a
    SIGINT that landed between the prompt and input()'s read(2) left it waiting (1 in 8 here)."""
    main, sub = os.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "hearth", "run", str(instruct), *GREEDY],
                            stdin=sub, stdout=sub, stderr=sub, preexec_fn=_controlling_tty, close_fds=True)
    os.close(sub)
    seen = bytearray()
    try:
        assert _read_until(main, b">>> ", seen, 120), seen.decode(errors="replace")
        for turn in range(5):
            if turn % 2 == 0:  # after an answer too
                os.write(main, b"hello there\r")
                assert _read_until(main, b">>> ", seen, 30), seen.decode(errors="replace")
            os.write(main, b"\x03")  # at once, as a prompt's first keystroke may
            assert _read_until(main, b"Use Ctrl + d or /bye to exit.", seen, 10), seen.decode(errors="replace")
            assert _read_until(main, b">>> ", seen, 10), seen.decode(errors="replace")
        os.write(main, b"\x04")
        assert proc.wait(30) == 0
        assert b"Exception ignored" not in seen and b"Traceback" not in seen
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(main)
