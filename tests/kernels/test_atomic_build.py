"""A kernel build leaves its cache file whole or nothing: no partial file after a failure, Ctrl-C, or
(swept by the next build) a kill. The compilers here are small Python scripts standing in for g++."""

import os
import signal
import sys
import threading
import time

import pytest

from hearth.kernels.atomic_build import BUILD_TIMEOUT, PARTIAL, build_into

# writes its output at once; then, as g++ hands the link to ld, a child writes it again 1.5 s later;
# then says it is under way (argv[2]) and waits
SLOW_LINK = ("import pathlib, subprocess, sys, time; open(sys.argv[1], 'wb').close(); "
             "subprocess.Popen([sys.executable, '-c', 'import sys, time; time.sleep(1.5); "
             "open(sys.argv[1], \"wb\").write(b\"late\")', sys.argv[1]]); "
             "pathlib.Path(sys.argv[2]).touch(); time.sleep(60)")


def compiler(code: str, *more: str):
    return lambda partial: [sys.executable, "-c", code, partial, *more]


def test_a_build_lands_whole_under_its_name(tmp_path):
    out = tmp_path / "lib-abc.so"
    assert build_into(out, compiler("import sys; open(sys.argv[1], 'wb').write(b'ELF')")) == out
    assert out.read_bytes() == b"ELF" and os.listdir(tmp_path) == ["lib-abc.so"]


def test_a_failed_build_leaves_nothing(tmp_path):
    code = "import sys; open(sys.argv[1], 'wb').write(b'half'); sys.exit('x.cpp:1: error: nope')"
    with pytest.raises(RuntimeError, match="failed: x.cpp:1: error: nope"):
        build_into(tmp_path / "lib-abc.so", compiler(code))
    assert os.listdir(tmp_path) == []


def test_ctrl_c_during_a_build_leaves_nothing_even_from_the_linker(tmp_path):
    """Ctrl-C mid-build: the compiler and the process it started are killed before the partial file
    is removed. Before, only the driver was killed and the 'linker' wrote its file after the cleanup."""
    folder, started = tmp_path / "kernels", tmp_path / "started"
    folder.mkdir()

    def interrupt():  # once the 'linker' runs, as a user's Ctrl-C lands mid-build
        end = time.monotonic() + 60
        while not started.exists() and time.monotonic() < end:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGINT)

    # Python's own Ctrl-C handler: a shell's background job (make test's tier passes beside the first)
    # starts with SIGINT ignored, and then no KeyboardInterrupt comes
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupt, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            build_into(folder / "lib-abc.so", compiler(SLOW_LINK, str(started)))
    finally:
        signal.signal(signal.SIGINT, previous)
    time.sleep(2.5)  # past the late write, had its writer lived
    assert os.listdir(folder) == []


def test_a_build_sweeps_what_killed_builds_left(tmp_path):
    """SIGTERM or SIGKILL mid-build leave a partial (older hearths: a 0-byte tmp*.so): the next build
    removes those older than any build may run, and leaves a younger one (a build going on) alone."""
    old = [tmp_path / "tmpa1b2c3.so", tmp_path / f"lib-abc.so.x1y2{PARTIAL}"]
    young = tmp_path / f"lib-def.so.z9{PARTIAL}"
    for path in (*old, young):
        path.write_bytes(b"")
    for path in old:
        os.utime(path, (time.time() - 3 * BUILD_TIMEOUT,) * 2)
    build_into(tmp_path / "lib-new.so", compiler("import sys; open(sys.argv[1], 'wb').write(b'ELF')"))
    assert sorted(os.listdir(tmp_path)) == sorted(["lib-new.so", young.name])
