"""`hearth doctor`, run as a user runs it: a fresh process, its own HEARTH_HOME."""

import os
import shutil
import subprocess
import sys

import pytest

from hearth.kernels import tiers
from hearth.loader.catalog import CATALOG
from hearth.loader.store import hearth_home
from hearth.memory.this_machine import CACHE


def _doctor(tmp_path, measured: bool = False, **env) -> str:
    """measured: this machine's cached measurement (HEARTH_HOME's plan cache, where there is one) copied
    in, so doctor reads it instead of measuring the memory again (seconds of copies and matmuls)."""
    home = tmp_path / "home"
    home.mkdir()
    built = hearth_home() / "kernels"
    if built.is_dir():  # the session's compiled kernels: no second build of the same library
        (home / "kernels").symlink_to(built)
    cached = hearth_home() / CACHE
    if measured and cached.is_file():
        (home / CACHE).parent.mkdir(parents=True)
        shutil.copy(cached, home / CACHE)
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("HEARTH_")}
    done = subprocess.run([sys.executable, "-m", "hearth", "doctor"], capture_output=True, text=True, timeout=300,
                          env={**run_env, "HEARTH_HOME": str(home), **env})
    assert done.returncode == 0, done.stderr
    return done.stdout


def _line(out: str, head: str) -> str:
    return next(ln for ln in out.splitlines() if ln.startswith(head))


def test_doctor_names_the_tier_the_flags_the_memory_and_the_models(tmp_path):
    out = _doctor(tmp_path, HEARTH_CPU_TIER="torch", HEARTH_HUGE_PAGES="0")
    assert _line(out, "tier ").startswith("tier      torch (forced by the environment")
    assert _line(out, "weights ") == "weights   the C++ kernels stream them from the file mapping (HEARTH_HUGE_PAGES=0)"
    assert "kernels   not loaded" in out
    flags = tiers.cpu_flags()
    found = _line(out, "flags ").split("(missing")[0].split()[1:]
    assert found and set(found) <= flags
    for name in tiers.BY_NAME:
        state = _line(out, f"  {name} ")
        assert ("runs" in state) == (tiers.why_not(name) is None), state
    if tiers.machine() != "aarch64":  # the neon tier: whether its cross-test can run here
        lacking = [t for t in tiers.CROSS_TOOLS["neon"] if shutil.which(t) is None]
        assert _line(out, "  neon ").endswith(f"lacks {', '.join(lacking)}" if lacking else
                                              "make test-arm tests its kernels under qemu")
    assert "GB/s" in _line(out, "memory ")  # measured into the fresh HEARTH_HOME
    assert "HEARTH_CPU_TIER=torch" in _line(out, "env ")
    for name in CATALOG:  # nothing is downloaded in a fresh home
        assert _line(out, f"  {name} ").split()[-1] == "no"


@pytest.mark.skipif(tiers.choose({}, tiers.cpu_flags(), tiers.machine())[0] is tiers.TORCH,
                    reason="no native tier runs on this CPU")
def test_doctor_explains_a_forced_tier_it_cannot_use(tmp_path):
    out = _doctor(tmp_path, measured=True, HEARTH_CPU_TIER="bogus")  # the memory line is the other test's
    best = tiers.choose({}, tiers.cpu_flags(), tiers.machine())[0].name
    tier = _line(out, "tier ")
    assert tier.startswith(f"tier      {best} (HEARTH_CPU_TIER=bogus is not a tier"), tier
    assert "gguf_kernels-" in _line(out, "kernels ")
