"""How the OpenMP threads of torch and the C++ kernels wait between parallel regions: libgomp's
default spins up to 300,000 pause loops (milliseconds) before sleeping. On an idle machine that
catches the next region at once; on shared cores (a desktop compiling, other servers, a CI runner) a
spinning thread holds the core its partner needs, and every region's barrier waits a time slice: a
new user's trial measured 12-17x fewer tokens/s at 2 threads under a load of 4-5 on 2 cores.
A short spin before sleeping keeps the quiet machine's speed (docs/performance.md, twelfth session).
It must be set before libgomp loads (torch's import): hearth's package import does it. A user's
OMP_WAIT_POLICY or GOMP_SPINCOUNT wins."""

from __future__ import annotations

import os

SPIN_COUNT = "1000"
"""libgomp's busy-wait loops before a waiting thread sleeps (its own default: 300,000)."""


def set_wait_policy() -> None:
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = SPIN_COUNT
