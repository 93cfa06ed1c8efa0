"""The neon tier's kernels on a machine of another architecture: its library (built by
hearth.kernels.native's own build, with the aarch64 cross compiler as CXX) and neon_driver.cpp run
under qemu-user. A Script holds the calls, in the argument order and types of native.SIGNATURES and
fused_layer.LAYER_SIGNATURES (the tables ctypes uses, from which the driver's signatures.h is made);
its tensors travel as files."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import torch

from hearth.kernels import native, tiers
from hearth.kernels.fused_layer import LAYER_SIGNATURES

CXX, QEMU = tiers.CROSS_TOOLS["neon"]
HERE = Path(__file__).resolve().parent
VARIANTS = {  # the two builds a CPU can get: baseline aarch64, and with the int8 dot-product instructions
    "plain": native.Library(native.NEON_LIBRARY.source, (), native.NEON_LIBRARY.provides),
    "dotprod": native.Library(native.NEON_LIBRARY.source, native.NEON_DOTPROD, native.NEON_LIBRARY.provides),
}
CPUS = {"plain": "cortex-a72", "dotprod": "neoverse-n1"}
"""The CPU qemu emulates for each build: one without the dot-product instructions (SDOT in the plain build
would stop it), one with them (Graviton 2's core)."""
C_TYPES = {ctypes.c_void_p: "void*", ctypes.c_int64: "int64_t", ctypes.c_uint64: "uint64_t", ctypes.c_int: "int", ctypes.c_float: "float", None: "void"}


def missing_tool() -> str | None:
    """The first cross tool not on PATH (what a skip names), or None."""
    return next((t for t in (CXX, QEMU) if shutil.which(t) is None), None)


@contextlib.contextmanager
def _cxx(cxx: str):
    old = os.environ.get("CXX")
    os.environ["CXX"] = cxx
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("CXX")
        else:
            os.environ["CXX"] = old


def build_library(variant: str) -> Path:
    """The neon library of `variant`, cross-compiled with the flags native.py gives it (cached in
    $HEARTH_HOME/kernels like every tier's)."""
    with _cxx(shutil.which(CXX)):
        return native._build(VARIANTS[variant])


def signatures_header() -> str:
    """signatures.h: one {name, &call<result, args...>} entry per C entry point."""
    sigs = {**native.SIGNATURES, **LAYER_SIGNATURES}
    return "".join(f'{{"{name}", &call<{", ".join(C_TYPES[t] for t in [res, *args])}>}},\n'
                   for name, (res, args) in sorted(sigs.items()))


def build_driver(folder: Path) -> Path:
    """neon_driver (cached beside the libraries, keyed by its source and signatures)."""
    header, source = signatures_header(), (HERE / "neon_driver.cpp").read_text()
    key = hashlib.sha256((header + source).encode()).hexdigest()[:16]
    out = folder / f"neon_driver-{key}"
    if not out.exists():
        tmp = folder / f"{out.name}.{os.getpid()}"
        inc = folder / f"include-{key}"
        inc.mkdir(exist_ok=True)
        (inc / "signatures.h").write_text(header)
        r = subprocess.run([shutil.which(CXX), "-O1", "-std=c++17", "-I", str(inc), "-o", str(tmp),
                            str(HERE / "neon_driver.cpp"), "-ldl"], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        os.replace(tmp, out)
    return out


@functools.cache
def sysroot() -> Path:
    """The aarch64 libraries the cross compiler links against (qemu's -L): libc.so.6's lib/'s parent."""
    libc = subprocess.run([shutil.which(CXX), "-print-file-name=libc.so.6"], capture_output=True, text=True).stdout
    return Path(libc.strip()).resolve().parent.parent


def _bytes(t: torch.Tensor) -> bytes:
    return t.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes()


class Script:
    """Calls for the driver. Arguments: Script refs ('@b3', '$r1'), None (a null pointer), ints and
    floats (passed as the signature's type)."""

    def __init__(self, folder: Path):
        self.folder, self.lines, self.n = folder, [], 0
        self.outputs: dict[str, torch.Tensor] = {}
        self.results: dict[str, str] = {}
        folder.mkdir(parents=True, exist_ok=True)

    def _name(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def tensor(self, t: torch.Tensor) -> str:
        """A copy of t (contiguous) in the driver's memory."""
        name = self._name("b")
        (self.folder / f"{name}.bin").write_bytes(_bytes(t))
        self.lines.append(f"load {name} {name}.bin")
        return "@" + name

    def output(self, t: torch.Tensor) -> str:
        """As tensor(t), and read back after the run into a tensor like t (read(ref))."""
        ref = self.tensor(t)
        self.outputs[ref] = t.detach().contiguous().clone()
        self.lines.append(f"save {ref[1:]} {ref[1:]}.out")
        return ref

    def pointers(self, *refs: str | None) -> str:
        name = self._name("p")
        self.lines.append(f"ptrs {name} " + " ".join("null" if r is None else r for r in refs))
        return "@" + name

    def has(self, symbol: str) -> None:
        self.lines.append(f"sym {symbol}")

    def call(self, fn: str, *args) -> str:
        """fn(*args); its result is results[ref[1:]] after the run, and a pointer result is ref."""
        name = self._name("r")
        words = ["null" if a is None else repr(float(a)) if isinstance(a, float) else str(a) for a in args]
        self.lines.append(f"call {name} {fn} " + " ".join(words))
        return "$" + name

    def run(self, library: Path, driver: Path, cpu: str, threads: int = 2) -> None:
        """Everything, in one qemu process emulating `cpu`; then results and outputs are filled in."""
        script = self.folder / "script.txt"
        # saves last: an output is read back after every call that writes it
        saves = [ln for ln in self.lines if ln.startswith("save ")]
        script.write_text("\n".join([ln for ln in self.lines if not ln.startswith("save ")] + saves) + "\n")
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        r = subprocess.run([shutil.which(QEMU), "-cpu", cpu, "-L", str(sysroot()), str(driver), str(library), str(script)],
                           capture_output=True, text=True, timeout=600, env=env)
        assert r.returncode == 0, f"qemu run failed ({r.returncode}): {r.stderr[-2000:]}"
        for line in r.stdout.splitlines():
            key, value = line.split()
            self.results[key] = value
        for ref, like in self.outputs.items():
            data = bytearray((self.folder / f"{ref[1:]}.out").read_bytes())
            self.outputs[ref] = torch.frombuffer(data, dtype=like.dtype).reshape(like.shape)

    def result(self, ref: str) -> int:
        return int(self.results[ref.lstrip("$")])

    def read(self, ref: str) -> torch.Tensor:
        return self.outputs[ref]
