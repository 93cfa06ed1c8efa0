"""CPU tier choice (hearth.kernels.tiers): the best tier a CPU runs, HEARTH_CPU_TIER and its bad-input
lines, on made-up flag sets (nothing here depends on this machine's CPU)."""

from __future__ import annotations

import platform
import sys

import pytest

from hearth.kernels import tiers
from hearth.kernels.tiers import AMX, AVX512, choose

SPR = set(AVX512 + AMX) | {"sse4_2", "avx2"}  # Sapphire Rapids with tiles
NO_TILES = set(AVX512) | {"avx512_bf16", "avx2"}  # the same CPU kind without AMX
AVX2 = {"avx2", "fma", "f16c", "bmi2"}  # an Intel laptop, AMD Zen 1-3
ZEN3 = AVX2 | {"sse4_2", "avx", "aes", "sha_ni"}
NO_F16C = AVX2 - {"f16c"}  # no CPU ships so, but flags get masked (VMs)


@pytest.mark.parametrize("flags,best", [(SPR, "amx"), (NO_TILES, "avx512"), (AVX2, "avx2"), (ZEN3, "avx2"),
                                        (NO_F16C, "torch"), (set(), "torch")])
def test_the_best_tier_the_cpu_runs(flags, best):
    assert choose({}, flags) == (tiers.BY_NAME[best], None)


ARM = {"fp", "asimd", "evtstrm", "aes", "crc32", "asimddp"}  # /proc/cpuinfo "Features" of an aarch64 CPU


def test_aarch64_gets_neon_and_another_os_torch():
    assert choose({}, ARM, arch="aarch64") == (tiers.BY_NAME["neon"], None)
    assert choose({}, SPR, arch=None)[0].name == "torch"
    assert choose({}, set(), arch="aarch64")[0].name == "torch"  # no asimd listed (a masked VM): torch


@pytest.mark.parametrize("name", ["amx", "avx512", "avx2", "torch", " AVX512 ", "AVX2"])
def test_a_forced_tier_the_cpu_runs(name):
    assert choose({"HEARTH_CPU_TIER": name}, SPR) == (tiers.BY_NAME[name.strip().lower()], None)


def test_native_0_means_torch():
    assert choose({"HEARTH_NATIVE": "0"}, SPR) == (tiers.TORCH, None)
    assert choose({"HEARTH_NATIVE": "0", "HEARTH_CPU_TIER": "amx"}, SPR) == (tiers.TORCH, None)


@pytest.mark.parametrize("env,flags,line", [
    ({"HEARTH_CPU_TIER": "amx"}, NO_TILES,
     "HEARTH_CPU_TIER=amx needs CPU flag amx_tile, which this CPU lacks; using avx512"),
    ({"HEARTH_CPU_TIER": "avx512"}, AVX2,
     "HEARTH_CPU_TIER=avx512 needs CPU flag avx512f, which this CPU lacks; using avx2"),
    ({"HEARTH_CPU_TIER": "avx512"}, set(AVX512) - {"avx512_vnni"},
     "HEARTH_CPU_TIER=avx512 needs CPU flag avx512_vnni, which this CPU lacks; using avx2"),
    ({"HEARTH_CPU_TIER": "avx2"}, NO_F16C,
     "HEARTH_CPU_TIER=avx2 needs CPU flag f16c, which this CPU lacks; using torch"),
    ({"HEARTH_CPU_TIER": "neon"}, AVX2,
     f"HEARTH_CPU_TIER=neon needs aarch64 Linux (this is {sys.platform}/{platform.machine()}); using avx2"),
    ({"HEARTH_CPU_TIER": "avx9000"}, NO_TILES,
     "HEARTH_CPU_TIER=avx9000 is not a tier; use one of amx, avx512, avx2, neon, torch; using avx512"),
])
def test_a_tier_that_cannot_run_is_one_line_naming_why_and_what_runs(env, flags, line):
    tier, warning = choose(env, flags)
    assert warning == line and "\n" not in warning
    assert tier.name == line.rsplit("using ", 1)[1]


def test_a_tier_on_the_wrong_platform_names_it():
    _, warning = choose({"HEARTH_CPU_TIER": "avx512"}, SPR, arch=None)
    assert warning.startswith("HEARTH_CPU_TIER=avx512 needs x86-64 Linux (this is ")
    assert warning.endswith("; using torch")
    _, warning = choose({"HEARTH_CPU_TIER": "avx2"}, ARM, arch="aarch64")
    assert warning.startswith("HEARTH_CPU_TIER=avx2 needs x86-64 Linux (this is ")
    assert warning.endswith("; using neon")


def test_selected_warns_once_through_the_log(monkeypatch, caplog):
    monkeypatch.setattr(tiers, "cpu_flags", lambda: NO_TILES)
    monkeypatch.setattr(tiers, "machine", lambda: "x86_64")
    monkeypatch.setenv("HEARTH_CPU_TIER", "amx")
    monkeypatch.delenv("HEARTH_NATIVE", raising=False)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "ALL")  # the real one stays as it is
    tiers.selected.cache_clear()
    try:
        assert tiers.selected().name == "avx512" and tiers.selected().name == "avx512"
    finally:
        tiers.selected.cache_clear()
    assert [r.getMessage() for r in caplog.records if r.name == "hearth.kernels"] == [
        "HEARTH_CPU_TIER=amx needs CPU flag amx_tile, which this CPU lacks; using avx512"]


def test_every_tier_needs_what_the_one_below_needs():
    """Within one architecture: the tiers are best first, each needing what the next one needs."""
    for arch in ("x86_64", "aarch64"):
        chain = [t for t in tiers.TIERS if t.arch in (arch, None)]
        for upper, lower in zip(chain, chain[1:]):
            assert set(lower.cpu_flags) <= set(upper.cpu_flags)
        assert [t.level for t in chain] == sorted((t.level for t in chain), reverse=True)


@pytest.fixture
def cpu(monkeypatch):
    """Pretend this machine has the given flags (x86-64 Linux with a compiler)."""
    monkeypatch.setattr(tiers, "machine", lambda: "x86_64")
    monkeypatch.setattr(tiers, "compiler", lambda: "g++")
    return lambda flags: monkeypatch.setattr(tiers, "cpu_flags", lambda: set(flags))


def test_make_test_hears_which_tiers_run_and_why_not_the_others(cpu, capsys):
    cpu(NO_TILES)
    assert tiers.main(["runnable"]) == 0 and capsys.readouterr().out == "avx512 avx2 torch\n"
    assert tiers.main(["skipped"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "tier amx not run here: needs CPU flag amx_tile, which this CPU lacks",
        f"tier neon not run here: needs aarch64 Linux (this is {sys.platform}/{platform.machine()})"]
    cpu(NO_F16C)
    assert tiers.main(["runnable"]) == 0 and capsys.readouterr().out == "torch\n"
    assert tiers.why_not("avx2") == "needs CPU flag f16c, which this CPU lacks"
    assert tiers.main([]) == 2


def test_no_compiler_leaves_torch(cpu, monkeypatch):
    cpu(SPR)
    monkeypatch.setattr(tiers, "compiler", lambda: None)
    assert [n for n in tiers.BY_NAME if tiers.why_not(n) is None] == ["torch"]
    assert tiers.why_not("amx") == "no C++ compiler (g++) found"
