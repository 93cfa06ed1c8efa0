"""CPU tiers: which kernels run on this CPU, chosen once at start (ggml's CPU variants by feature detection).

A tier is one record: its architecture, the /proc/cpuinfo flags it needs and what it enables. The best tier the CPU runs
is chosen; HEARTH_CPU_TIER=<name> forces one (a lower one on a better CPU: how CI tests every tier on
one machine), HEARTH_NATIVE=0 means torch. A forced tier that cannot run here, or an unknown name, is
one warning line naming the reason and the tier used instead. The C++ side obeys the choice through
hk_set_tier (csrc/tier.h); hearth.kernels.native asks selected() before it builds anything."""

from __future__ import annotations

import functools
import logging
import os
import platform
import shutil
import sys
from dataclasses import dataclass

log = logging.getLogger("hearth.kernels")

AVX2 = ("avx2", "fma", "f16c", "bmi2")
AVX512 = ("avx512f", "avx512bw", "avx512vl", "avx512_vnni") + AVX2
AMX = ("amx_tile", "amx_int8", "amx_bf16", "avx512_bf16")
NEON = ("asimd",)  # aarch64's Advanced SIMD (every aarch64 CPU); asimddp (SDOT) is taken where present
ARCH_NAMES = {"x86_64": "x86-64", "aarch64": "aarch64"}


@dataclass(frozen=True, slots=True)
class Tier:
    name: str
    cpu_flags: tuple[str, ...]
    """/proc/cpuinfo flags the tier's code needs (all of them)."""
    native: bool
    """The C++ kernels run (else the torch paths)."""
    level: int
    """What hk_set_tier tells the C++ side (csrc/tier.h's CpuTier); 0 without C++ kernels."""
    enables: str
    arch: str | None = "x86_64"
    """The machine (platform.machine() on Linux) its C++ code is built for; None for torch's tier."""
    onednn_cap: str | None = None
    """ONEDNN_MAX_CPU_ISA when this tier is forced on a CPU above it: torch's own matmuls then take the
    code a CPU of this tier runs (oneDNN reads it once, at its first use)."""
    dense_dtype: str = "bfloat16"
    """The dtype of the dense matmuls the kernels leave to torch (prefill tiles): on an AVX2 CPU torch's
    bf16 matmul has no oneDNN kernel (measured 1.7 GFLOP/s against f32's 38 at 2 threads)."""


TIERS = (  # best first
    Tier("amx", AVX512 + AMX, True, 3, "C++ kernels with AMX int8 tiles (decode batches) and bf16 tiles (prefill)"),
    Tier("avx512", AVX512, True, 2, "C++ kernels on AVX-512 VNNI, no tiles: int8 GEMV, int8 GEMM from 10 rows (prefills too)",
         onednn_cap="AVX512_CORE_BF16"),
    Tier("avx2", AVX2, True, 1, "C++ kernels on AVX2 (int8 dot products, decode attention, an int8 GEMM for "
         "prefill; AVX-VNNI where present)", onednn_cap="AVX2", dense_dtype="float32"),
    Tier("neon", NEON, True, 1, "C++ kernels on NEON (int8 dot products, SDOT where the CPU has it; decode "
         "attention); prefill matmuls in torch f32", arch="aarch64", dense_dtype="float32"),
    Tier("torch", (), False, 0, "no C++ kernels: torch's CPU kernels", arch=None),
)
BY_NAME = {t.name: t for t in TIERS}
CROSS_TOOLS = {"neon": ("aarch64-linux-gnu-g++", "qemu-aarch64")}
"""A tier's cross compiler and emulator (Debian's g++-aarch64-linux-gnu, qemu-user): its kernel tests run
on a machine of another architecture with them (tests/arm, `make test-arm`)."""
TORCH = BY_NAME["torch"]


def cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo: x86's "flags", aarch64's "Features" (empty where
    there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            line = next(ln for ln in f if ln.startswith(("flags", "Features")))
    except (OSError, StopIteration):
        return set()
    return set(line.split(":", 1)[1].split())


def machine() -> str | None:
    """The architecture the C++ tiers are built for here (a Tier.arch), or None: not Linux, or a
    machine without C++ kernels."""
    m = {"AMD64": "x86_64", "arm64": "aarch64"}.get(platform.machine(), platform.machine())
    return m if sys.platform.startswith("linux") and m in ARCH_NAMES else None


def missing(tier: Tier, flags: set[str], arch: str | None = "x86_64") -> str | None:
    """Why `tier` cannot run on a CPU of `arch` with `flags` ("CPU flag amx_tile, which this CPU lacks"),
    or None when it can."""
    if tier.native and tier.arch != arch:
        return f"{ARCH_NAMES[tier.arch]} Linux (this is {sys.platform}/{platform.machine()})"
    lacking = [f for f in tier.cpu_flags if f not in flags]
    return f"CPU flag {lacking[0]}, which this CPU lacks" if lacking else None


def choose(env: dict, flags: set[str], arch: str | None = "x86_64") -> tuple[Tier, str | None]:
    """(the tier to use, the warning line or None) for environment `env` on a CPU of `arch` with `flags`."""
    best = next(t for t in TIERS if missing(t, flags, arch) is None)
    if env.get("HEARTH_NATIVE", "1") == "0":
        return TORCH, None
    forced = env.get("HEARTH_CPU_TIER", "").strip().lower()
    if not forced:
        return best, None
    tier = BY_NAME.get(forced)
    if tier is None:
        return best, f"HEARTH_CPU_TIER={forced} is not a tier; use one of {', '.join(BY_NAME)}; using {best.name}"
    why = missing(tier, flags, arch)
    if why is not None:
        return best, f"HEARTH_CPU_TIER={forced} needs {why}; using {best.name}"
    return tier, None


@functools.cache
def selected() -> Tier:
    """The tier chosen for this process (warned about once, when forced and not possible)."""
    tier, warning = choose(os.environ, cpu_flags(), machine())
    if warning:
        log.warning(warning)
    if tier.onednn_cap and tier is not choose({}, cpu_flags(), machine())[0]:
        os.environ.setdefault("ONEDNN_MAX_CPU_ISA", tier.onednn_cap)
    return tier


def forced() -> bool:
    return bool(os.environ.get("HEARTH_CPU_TIER", "").strip()) or os.environ.get("HEARTH_NATIVE", "1") == "0"


def compiler() -> str | None:
    """The C++ compiler the native tiers are built with: $CXX, else g++ or c++ on PATH."""
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")


def why_not(name: str) -> str | None:
    """Why tier `name` cannot run on this machine, or None when it can (what `make test` reports)."""
    tier = BY_NAME.get(name)
    if tier is None:
        return "not a tier"
    why = missing(tier, cpu_flags(), machine())
    if why is None and tier.native and compiler() is None:
        return "no C++ compiler (g++) found"
    return None if why is None else f"needs {why}"


def active() -> str:
    """The tier running here: the selected one, or where its kernels did not build or load the lower
    native tier whose did (native.lib), else torch."""
    from hearth.kernels import native  # native imports this module

    tier = selected()
    if not tier.native:
        return tier.name
    return native.loaded_tier.name if native.available() else TORCH.name


def main(argv: list[str]) -> int:
    """`python -m hearth.kernels.tiers runnable`: the tiers this machine runs, best first, on one line;
    `... skipped`: a line per other tier naming why (so a test run can say which tiers it left out)."""
    names = list(BY_NAME)
    if argv == ["runnable"]:
        print(" ".join(n for n in names if why_not(n) is None))
    elif argv == ["skipped"]:
        for n in names:
            if (why := why_not(n)) is not None:
                print(f"tier {n} not run here: {why}")
    else:
        print("usage: python -m hearth.kernels.tiers runnable|skipped", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
