"""How the OpenMP threads of torch and the C++ kernels wait between parallel regions: libgomp's
default spins up to 300,000 pause loops (milliseconds) before sleeping. On an idle machine that
catches the next region at once; on shared cores (a desktop compiling, other servers, a CI runner) a
spinning thread holds the core its partner needs, and every region's barrier waits a time slice: a
new user's trial measured 12-17x fewer tokens/s at 2 threads under a load of 4-5 on 2 cores.
10,000 loops keep an idle machine's decode speed (1,000 cost it ~7%) and took a loaded one from 55 s to
17 s (docs/performance.md, "OpenMP's spin").
libgomp reads it once, when it loads (torch's import): hearth's package import sets it, unless torch
came first or the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager

SPIN_COUNT = "10000"
"""libgomp's busy-wait loops before a waiting thread sleeps (its own default: 300,000)."""
MARK = "HEARTH_SET_GOMP_SPINCOUNT"
"""Set beside GOMP_SPINCOUNT when hearth chose it: hearth's child processes inherit both, and other
engines' processes (llama.cpp in the benchmarks) are started without them (peer_env)."""


def set_wait_policy() -> None:
    if "torch" in sys.modules or "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return  # too late (libgomp has read its environment), or the user's choice
    os.environ["GOMP_SPINCOUNT"], os.environ[MARK] = SPIN_COUNT, "1"


def set_by_hearth() -> bool:
    return os.environ.get(MARK) == "1" and os.environ.get("GOMP_SPINCOUNT") == SPIN_COUNT


def peer_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) without what hearth set: another engine keeps its own default."""
    env = dict(os.environ if env is None else env)
    if env.pop(MARK, None) == "1" and env.get("GOMP_SPINCOUNT") == SPIN_COUNT:
        del env["GOMP_SPINCOUNT"]
    return env


@contextmanager
def one_thread():
    """torch on one thread for what is hundreds of small ops (a model's repacking, a KV block's copies): a
    second thread only adds sync stalls; its threads back after. torch is imported here, not with the package."""
    import torch

    threads = torch.get_num_threads()
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
