"""`hearth doctor`: one screen of what a bug report needs — which CPU tier runs and why (the flags
found, the compiler, the kernel library), whether --device cuda can run, torch and its threads, the memory and its measured
bandwidth, the environment variables that change hearth's choices, and the models on disk."""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata

import torch

from hearth import openmp
from hearth.backends import cuda_missing
from hearth.commands.models import _catalog_row, _hub_rows, format_table, human_size
from hearth.errors import HearthError
from hearth.kernels import native, tiers
from hearth.layers import huge_pages
from hearth.loader.catalog import CATALOG
from hearth.loader.store import hearth_home
from hearth.memory.this_machine import CACHE, cpu_name, system_memory, this_device

ENV = ("HEARTH_HOME", "HEARTH_CPU_TIER", "HEARTH_NATIVE", "HEARTH_EXACT_LINEAR", "HEARTH_HUGE_PAGES", "OMP_NUM_THREADS",
       "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "CXX")
"""Variables that change what hearth runs."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--remeasure", action="store_true", help="measure the memory bandwidth again")


def main(args: argparse.Namespace) -> int:
    print(report(remeasure=args.remeasure))
    return 0


def report(remeasure: bool = False) -> str:
    home = hearth_home()
    lines = [f"hearth    {_version('hearth')} (python {platform.python_version()}, {sys.platform}/{platform.machine()})",
             f"torch     {torch.__version__}, {torch.get_num_threads()} threads, "
             f"ATen CPU capability {torch.backends.cpu.get_cpu_capability()}",
             f"cpu       {cpu_name()}, {os.cpu_count()} cores"]
    lines += _tier_lines()
    lines.append(_gpu_line())
    lines.append(_memory_line(home, remeasure))
    lines.append(f"weights   the C++ kernels stream them from {huge_pages.mode()}")
    env = [f"{k}={os.environ[k]}" + (" (hearth's default)" if k == "GOMP_SPINCOUNT" and openmp.set_by_hearth() else "")
           for k in ENV if k in os.environ]
    lines.append(f"env       {' '.join(env) or 'none of ' + ', '.join(ENV)}")
    free = shutil.disk_usage(home if home.exists() else home.anchor).free
    lines.append(f"models    $HEARTH_HOME = {home} ({human_size(free)} free)")
    rows = [_catalog_row(e, home) for e in CATALOG.values()] + _hub_rows(home)
    lines += ["  " + row for row in format_table([("NAME", "SIZE", "ARCH/QUANT", "DOWNLOADED"), *rows]).splitlines()]
    return "\n".join(lines)


def _gpu_line() -> str:
    """What --device cuda would run on, or what it lacks (hearth.backends.select)."""
    missing = cuda_missing()
    if missing is not None:
        return f"gpu       --device cuda: {missing}"
    return f"gpu       {torch.cuda.get_device_name(0)}: --device cuda runs the Triton kernels (not yet measured)"


def _tier_lines() -> list[str]:
    flags, arch = tiers.cpu_flags(), tiers.machine()
    tier, warning = tiers.choose(os.environ, flags, arch)
    best = tiers.choose({}, flags, arch)[0]
    if warning:
        why = warning
    elif tiers.forced():
        why = "forced by the environment"
    else:
        why = "the best this CPU runs"
    active = tiers.active()  # builds and loads the kernels when the tier has them
    if active != tier.name:
        why = f"{tier.name}'s kernels did not load: {native.load_error}"
    checked = dict.fromkeys(f for t in tiers.TIERS for f in t.cpu_flags if t.arch in (arch, None))
    lines = [f"tier      {active} ({why}" + (f"; the best here is {best.name})" if active != best.name else ")"),
             f"flags     {' '.join(f for f in checked if f in flags) or 'none'} "
             f"(missing: {' '.join(f for f in checked if f not in flags) or 'none'})"]
    for name in tiers.BY_NAME:
        reason = tiers.why_not(name)
        lines.append(f"  {name:<8}{'runs' if reason is None else 'no: ' + reason}{_cross_note(name, arch)}")
    cxx = tiers.compiler()
    lines.append(f"compiler  {_compiler_version(cxx) if cxx else 'none found (the C++ tiers need g++)'}")
    caps = [c for c in native.CAPABILITIES if native.has(c)]
    lines.append(f"kernels   {native.library_path or 'not loaded'}" + (f" ({', '.join(caps)})" if caps else ""))
    return lines


def _cross_note(name: str, arch: str | None) -> str:
    """For a tier of another architecture with a cross-test (the neon kernels under qemu-user, `make
    test-arm`): whether its tools are here."""
    tier = tiers.BY_NAME[name]
    if not tier.native or tier.arch == arch or tier.name not in tiers.CROSS_TOOLS:
        return ""
    lacking = [t for t in tiers.CROSS_TOOLS[tier.name] if shutil.which(t) is None]
    return f"; make test-arm {'lacks ' + ', '.join(lacking) if lacking else 'tests its kernels under qemu'}"


def _memory_line(home, remeasure: bool) -> str:
    total = f"memory    {system_memory() / 2**30:.1f} GiB"
    try:
        dev = this_device(home, refresh=remeasure)
    except HearthError as e:
        return f"{total}; bandwidth not measured ({e})"
    int8 = f", int8 dots {dev.int8_ops / 1e9:.0f} GOP/s" if dev.int8_ops else ""
    return (f"{total}; read bandwidth {dev.bandwidth / 1e9:.1f} GB/s, bf16 {dev.peak_flops / 1e9:.0f} GFLOP/s{int8} "
            f"(measured, cached in $HEARTH_HOME/{CACHE}; --remeasure measures again)")


def _compiler_version(cxx: str) -> str:
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{cxx} (does not run: {e})"
    return f"{cxx} ({(out.splitlines() or ['?'])[0]})"


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "(not installed)"
