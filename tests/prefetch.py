"""What `make test` builds and fetches while pip installs the test dependencies (one core each), so
that the first test pass finds it in place: the C++ kernel library of every native tier this machine
runs, and the catalog models and BFCL data the tests read, into $HEARTH_HOME. On a fresh machine
these cost the first pass ~45 s of g++ and ~30 s of downloads on its critical path otherwise.
Best effort: what fails is one line here, and the test that needs it fails with its own error."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def catalog_models() -> list[str]:
    """The catalog models whose names the test files quote, in catalog order (smallest first)."""
    from hearth.loader.catalog import CATALOG

    text = "\n".join(p.read_text() for p in sorted(TESTS.rglob("*.py")))
    return [name for name in CATALOG if re.search(rf"[\"']{re.escape(name)}[\"']", text)]


def kernel_jobs() -> list[tuple[str, Callable[[], object]]]:
    """One build per kernel library of the tiers this machine runs (amx and avx512 share one)."""
    from hearth.kernels import native, tiers

    jobs, seen = [], set()
    for name in tiers.BY_NAME:
        library = native.LIBRARIES.get(name)
        if library is not None and tiers.why_not(name) is None and id(library) not in seen:
            seen.add(id(library))
            jobs.append((f"kernels {library.source}", lambda name=name: native.build(name)))
    return jobs


def fetch_jobs() -> list[tuple[str, Callable[[], object]]]:
    from hearth.evals.bfcl_data import fetch_wheel
    from hearth.loader.download import pull

    jobs = [(f"model {name}", lambda name=name: pull(name, progress=False)) for name in catalog_models()]
    return jobs + [("BFCL data", lambda: fetch_wheel(progress=False))]


def run(jobs: list[tuple[str, Callable[[], object]]]) -> int:
    """Each job in turn; the number that failed."""
    failed = 0
    for what, job in jobs:
        t0 = time.perf_counter()
        try:
            job()
            print(f"prefetch: {what} ready ({time.perf_counter() - t0:.1f} s)", flush=True)
        except Exception as e:  # noqa: BLE001  (best effort: the tests report their own errors)
            failed += 1
            print(f"prefetch: {what} failed ({e}); the tests that need it will try again", flush=True)
    return failed


def main() -> int:
    try:
        jobs = [kernel_jobs(), fetch_jobs()]
    except ImportError as e:  # make test installs only torch, gguf and tqdm before this runs
        print(f"prefetch: not run ({e}); the tests build and fetch what they need", flush=True)
        return 0
    with ThreadPoolExecutor(2) as pool:  # compiling is CPU, fetching mostly network and disk: side by side
        list(pool.map(run, jobs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
