"""The C++ kernels of csrc/: matmul, row lookup and bf16 expansion on GGUF blocks, attention, KV codecs.

Built on first use with the system g++ (a few seconds) into $HEARTH_HOME/kernels/, keyed by a hash
of the source and flags, and loaded with ctypes: plain C entry points need no Python or torch
headers (a torch extension would take ~30 s to compile) and a call costs ~1 us. OpenMP comes from
the libgomp torch already loaded (same soname), so both share one thread pool.

Which kernels run is the CPU tier (hearth.kernels.tiers): each native tier loads its library
(LIBRARIES: gguf_kernels.cpp for amx and avx512, gguf_kernels_avx2.cpp for avx2, gguf_kernels_neon.cpp
for neon on aarch64), which is told the
tier at load (hk_set_tier), so a lower tier forced on a better CPU leaves the better units off. A
library provides some CAPABILITIES (the avx2 one: no bf16 tiles, no quantized KV readers): callers
ask has(capability) and fall back to torch per missing one. `lib()` is None on the torch tier (an x86
CPU without AVX2/F16C, neither x86-64 nor aarch64 Linux, HEARTH_NATIVE=0 or HEARTH_CPU_TIER=torch), or when the build
fails (one warning line): callers fall back to the torch paths."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import re
import shutil
import sys
import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path

import torch

from hearth.formats.kv import NATIVE_SIDES
from hearth.formats.weights import NATIVE_IDS, native_ids
from hearth.kernels import tiers
from hearth.kernels.atomic_build import build_into
from hearth.kvstore import kvarn
from hearth.loader.store import hearth_home

CSRC = Path(__file__).parent / "csrc"
COMMON = ("-O3", "-std=c++17", "-shared", "-fPIC", "-fopenmp", "-ffp-contract=off", "-w")

CAPABILITIES: dict[str, tuple[str, ...]] = {
    "linear": ("hk_plan_new", "hk_plan_free", "hk_plan_rebase", "hk_linear", "hk_dequant_rows", "hk_dequant_bf16"),
    "fused_ops": ("hk_linear_residual", "hk_mlp", "hk_qk_rope"),
    "paged_attention": ("hk_paged_attention", "hk_kv_write", "hk_set_row_groups"),
    "layer": ("hk_layer_new", "hk_layer_free", "hk_layer_forward", "hk_stack_forward", "hk_layer_qk_whole"),
    "lora": ("hk_lora_new", "hk_lora_free", "hk_stack_forward_lora"),  # LoRA terms in the decode stack (csrc/lora_layer.h)
    "bf16_tiles": ("hk_gemm_bf16", "hk_amx_bf16", "hk_flash_prefill", "hk_prefill_attention",
                   "hk_prefill_attention_precise", "hk_stack_forward_prefill"),
    "gemm": ("hk_batch_min_rows", "hk_vnni_gemm", "hk_set_invariant_rows"),  # batch and prefill GEMMs without AMX
    "many_rows": ("hk_many_rows", "hk_avx_vnni", "hk_gemm_chunk_bytes"),  # the GEMV library's register-blocked GEMM for prefills (csrc/gemm_avx2.h)
    "kv_quant": ("hk_kvq_attention", "hk_hadamard", "hk_kvarn_encode", "hk_layer_forward_kvq"),
    "peaks": ("hk_read_pass", "hk_int8_dot_pass"),  # the roofline's passes (csrc/peaks.h): every library
    "moe": ("hk_moe",),  # a MoE block's routed experts over the stacked tensors (csrc/moe.h): every library
    "delta_net": ("hk_delta_net",),  # qwen35's Gated DeltaNet mixer (csrc/delta_net.h): every library
}
"""What a kernel library may implement: each capability is a set of entry points, present or absent
together; callers ask has(capability) and take the torch path where it is missing."""


@dataclass(frozen=True, slots=True)
class Library:
    """One kernel library: the source compiled (it includes its headers), with only the flags its
    tiers need, so a compiler that lacks one tier's flag still builds the others."""
    source: str
    flags: tuple[str, ...]
    provides: frozenset[str]
    """Its CAPABILITIES."""
    name: str = ""
    """What the line said while it builds calls it (the instruction set)."""


# the AMX and AVX512-BF16 flags let the compiler take those intrinsics; the code using them runs only
# after csrc's CPUID checks (amx_usable, amx_bf16_usable, avx512_bf16_usable)
AVX512_LIBRARY = Library("gguf_kernels.cpp", ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni", "-mavx512bf16",
                                              "-mamx-tile", "-mamx-int8", "-mamx-bf16", "-mf16c", "-mfma", "-mbmi2"),
                         frozenset(CAPABILITIES) - {"many_rows"}, "avx512")
DECODE_CAPABILITIES = frozenset({"linear", "fused_ops", "paged_attention", "layer", "lora", "peaks", "moe",
                                 "delta_net"})
"""What the decode-tier libraries (csrc/decode_library.h: avx2, neon) implement."""
AVX2_LIBRARY = Library("gguf_kernels_avx2.cpp", ("-mavx2", "-mfma", "-mf16c", "-mbmi2"),
                       DECODE_CAPABILITIES | {"many_rows"}, "avx2")
NEON_DOTPROD = ("-march=armv8.2-a+dotprod",)
"""The neon library's flags where the CPU has the int8 dot-product instructions (/proc/cpuinfo's asimddp):
its GEMV then takes vdotq_s32; without them it is built for baseline aarch64 (plain NEON)."""
NEON_LIBRARY = Library("gguf_kernels_neon.cpp",
                       NEON_DOTPROD if tiers.machine() == "aarch64" and "asimddp" in tiers.cpu_flags() else (),
                       DECODE_CAPABILITIES, "neon")
ABI_VERSION = 18
"""What every library's hk_abi_version() returns: the entry points' signatures (_declare, fused_layer)
are shared, so one number, bumped for a change to any of them, covers every library."""
LIBRARIES = {"amx": AVX512_LIBRARY, "avx512": AVX512_LIBRARY, "avx2": AVX2_LIBRARY, "neon": NEON_LIBRARY}
"""Native tier name -> the library it loads."""
QTYPES = NATIVE_IDS
"""GGML type ids some tier's kernels read -> names (the records of hearth.formats.weights with native=True);
qtypes() those of the tier running."""


def qtypes() -> dict[int, str]:
    """GGML type ids the loaded library reads at its tier -> names (the selected tier's before lib() runs)."""
    return native_ids((loaded_tier or tiers.selected()).name)

_lib: ctypes.CDLL | None = None
_library: Library | None = None
_tried = False
library_path: Path | None = None
"""The kernel library loaded, once lib() has run (what `hearth doctor` reports)."""
load_error: str | None = None
"""Why the selected native tier's kernels did not load, or None."""
loaded_tier: tiers.Tier | None = None
"""The native tier whose library lib() loaded: the selected one, or a lower one where that failed."""
_p, _i64, _int = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int


def lib() -> ctypes.CDLL | None:
    """The selected tier's library; where it does not build or load, the next lower native tier's
    other library (an AVX-512 CPU whose compiler lacks the AVX-512 flags still gets avx2), else None.
    A fallback is one warning line: the tier, its first error, the tier used."""
    global _lib, _library, _tried, load_error, library_path, loaded_tier
    if not _tried:
        _tried = True
        tier = tiers.selected()
        for t in fallbacks(tier):
            try:
                library_path = _build(LIBRARIES[t.name])
                _lib, _library, loaded_tier = _load(t, LIBRARIES[t.name]), LIBRARIES[t.name], t
                break
            except Exception as e:  # noqa: BLE001  (any failure means: a lower tier, or the torch paths)
                load_error = load_error or str(e)
                library_path = None
        if load_error is not None:
            used = loaded_tier.name if loaded_tier else tiers.TORCH.name
            tiers.log.warning(f"the {tier.name} tier's kernels are unavailable ({load_error}); using {used}")
    return _lib


def fallbacks(tier: tiers.Tier) -> list[tiers.Tier]:
    """`tier`, then the native tiers below it of its architecture with another library (amx and avx512
    share one): what lib() tries in order. Empty for the torch tier."""
    out = [tier] if tier.native else []
    for t in tiers.TIERS[tiers.TIERS.index(tier) + 1:]:
        if t.native and t.arch == tier.arch and all(LIBRARIES[t.name] is not LIBRARIES[o.name] for o in out):
            out.append(t)
    return out


def available() -> bool:
    return lib() is not None


def has(capability: str) -> bool:
    """The loaded kernel library implements `capability` (a key of CAPABILITIES)."""
    assert capability in CAPABILITIES, capability
    return available() and capability in _library.provides


def entry_points() -> set[str]:
    """The C entry points of the loaded library's capabilities (empty without one)."""
    return set().union(*(CAPABILITIES[c] for c in _library.provides)) if available() else set()


@functools.cache
def bf16_tiles() -> bool:
    """The kernels multiply prefill-sized batches on AMX bf16 tiles here (Sapphire Rapids and later)."""
    return has("bf16_tiles") and bool(lib().hk_amx_bf16())


@functools.cache
def flash_prefill() -> bool:
    """prefill_attention's flash kernel runs here: on AMX bf16 tiles, or without them on AVX512-BF16
    (Zen 4); elsewhere long chunks take torch's SDPA."""
    return has("bf16_tiles") and bool(lib().hk_flash_prefill())


@functools.cache
def batch_min_rows() -> int:
    """From this many rows on the kernels' matmuls leave the GEMV, up to a plan's gemm_min_rows (the
    prefill kernels): for AMX int8 tiles, or without AMX the int8 VNNI GEMM (vnni_gemm()). Their sums
    run in another order than the GEMV's: the runner's first row regime. 0 where the library has no
    batch GEMMs (the avx2 one: one GEMV for every row count)."""
    return int(lib().hk_batch_min_rows()) if has("gemm") else 0


EXACT_TILE_ROWS, EXACT_TAIL_ROWS = 16, 8
"""Within batch_invariant on AMX: activation rows per pass of the exact tiles over the weights, and
the most rows past a multiple of it that take the GEMV instead of a pass (csrc/gguf_kernels.cpp)."""


@contextlib.contextmanager
def batch_invariant(n: int):
    """Within: matmuls of up to n rows (below a plan's gemm_min_rows) sum every row as the GEMV does,
    whose rows are bit-identical at every row count (a verify step's rows as decode rows): with AMX
    on exact int8 tiles (csrc/amx.h), else on the GEMV itself. 0, or a library without batch GEMMs
    (one GEMV already): no change."""
    if n <= 0 or not has("gemm"):
        yield
        return
    lib().hk_set_invariant_rows(n)
    try:
        yield
    finally:
        lib().hk_set_invariant_rows(0)


@contextlib.contextmanager
def row_groups(on: bool):
    """Within: a sequence's rows in one step attend as one row group (csrc/attention_tasks.h: K/V read
    once for all of them; the default) or each task on its own. The bits are the same either way
    (tests and A/B measurements compare the two)."""
    lib().hk_set_row_groups(int(on))
    try:
        yield
    finally:
        lib().hk_set_row_groups(1)


@functools.cache
def vnni_gemm() -> bool:
    """Batches of batch_min_rows() on run on the int8 VNNI GEMM here (csrc/gemm_vnni.h: a CPU or tier
    without AMX), not on AMX int8 tiles."""
    return has("gemm") and bool(lib().hk_vnni_gemm())


def build(name: str) -> Path:
    """The compiled library of native tier `name`, built now unless one of its sources and flags is
    cached (make test builds every tier's while pip installs: tests/prefetch.py)."""
    return _build(LIBRARIES[name])


def open_tier(name: str) -> ctypes.CDLL:
    """The kernel library of native tier `name`, loaded on its own beside the selected one (tests and
    benchmarks compare tiers in one process); raises where that tier cannot run here."""
    tier = tiers.BY_NAME[name]
    if (why := tiers.why_not(name)) is not None:
        raise RuntimeError(f"tier {name} cannot run here: {why}")
    library = LIBRARIES[name]
    if lib() is None or library is not _library:
        return _load(tier, library)
    # dlopen would hand back the selected library itself, and hk_set_tier would change its tier for
    # the whole process (amx -> avx512 turned the tiles off): load a copy of its own instead
    with tempfile.TemporaryDirectory(prefix="hearth-kernels-") as tmp:
        copy = Path(tmp) / f"{name}.so"
        shutil.copyfile(_build(library), copy)
        return _load(tier, library, copy)  # loaded, the file may go


def _load(tier: tiers.Tier, library: Library, path: Path | None = None) -> ctypes.CDLL:
    so = ctypes.CDLL(str(path or _build(library)))
    _declare(so, library)
    if so.hk_abi_version() != ABI_VERSION or not so.hk_cpu_ok():
        raise RuntimeError("kernel library does not match this CPU or version")
    if so.hk_set_tier(tier.level) != 0:
        raise RuntimeError(f"kernel library does not know tier level {tier.level}")
    return so


def _cpu_flags() -> set[str]:
    return tiers.cpu_flags()


def sources(library: Library) -> list[Path]:
    """The library's source and every csrc header it includes, directly or not (its cache key)."""
    found, todo = [], [CSRC / library.source]
    while todo:
        f = todo.pop()
        if f in found or not f.exists():
            continue
        found.append(f)
        todo += [CSRC / m for m in re.findall(r'^#include "([^"]+)"', f.read_text(), re.M)]
    return sorted(found)


def command(cxx: str, library: Library, out: str) -> list[str]:
    return [cxx, *COMMON, *library.flags, "-o", out, str(CSRC / library.source)]


def _build(library: Library) -> Path:
    cxx = tiers.compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler (g++) found")
    src = b"".join(f.name.encode() + f.read_bytes() for f in sources(library))
    flags = " ".join(command(cxx, library, "")).replace(str(CSRC), "csrc")  # checkouts share a build
    key = hashlib.sha256(src + flags.encode()).hexdigest()[:16]
    for out_dir in (hearth_home() / "kernels", Path(tempfile.gettempdir()) / f"hearth-kernels-{os.getuid()}"):
        out = out_dir / f"{Path(library.source).stem}-{key}.so"
        if out.exists():
            return out
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            if os.access(out_dir, os.W_OK):
                break
        except OSError:
            continue
    else:
        raise RuntimeError("no writable directory for the compiled kernels")
    # stderr, once per build: the first run is otherwise silent for a minute (stdout stays the answer's)
    print(f"hearth: building the {library.name or Path(library.source).stem} kernels for this CPU (first run "
          "only, about a minute)...", file=sys.stderr, flush=True)
    return build_into(out, lambda partial: command(cxx, library, partial))


_f32 = ctypes.c_float


SIGNATURES = {  # name: (restype, argtypes)
    "hk_abi_version": (_int, []),
    "hk_cpu_ok": (_int, []),
    "hk_set_tier": (_int, [_int]),
    "hk_neon_dotprod": (_int, []),
    "hk_plan_new": (_p, [_int, _p, _p, _p, _p, _i64, _i64]),
    "hk_plan_free": (None, [_p]),
    "hk_plan_rebase": (None, [_p, _int, _p]),
    "hk_linear": (None, [_p, _p, _int, _i64, _i64, _p, _f32, _p, _p, _i64]),
    "hk_linear_residual": (None, [_p, _p, _i64, _i64, _p, _f32, _p, _i64]),
    "hk_mlp": (None, [_p, _p, _int, _p, _i64, _i64, _p, _f32, _p, _f32]),
    "hk_moe": (_int, [_p, _p, _i64, _int, _p, _i64, _i64, _p, _p, _i64, _p, _i64]),
    "hk_qk_rope": (None, [_p, _i64, _i64, _i64, _i64, _i64, _p, _f32, _p, _p, _int]),
    "hk_dequant_rows": (_int, [_p, _int, _i64, _i64, _i64, _p, _i64, _p]),
    "hk_dequant_bf16": (_int, [_p, _int, _i64, _i64, _i64, _i64, _p]),
    "hk_gemm_bf16": (_int, [_p, _p, _i64, _i64, _p, _i64]),
    "hk_amx_bf16": (_int, []),
    "hk_flash_prefill": (_int, []),
    "hk_batch_min_rows": (_int, []),
    "hk_vnni_gemm": (_int, []),
    "hk_set_invariant_rows": (None, [_i64]),
    "hk_many_rows": (_int, []),
    "hk_avx_vnni": (_int, [_int]),
    "hk_gemm_chunk_bytes": (_i64, [_i64]),
    "hk_read_pass": (ctypes.c_uint64, [_p, _i64, _i64]),
    "hk_int8_dot_pass": (_i64, [_i64]),
    "hk_paged_attention": (_int, [_p, _i64, _p, _int, _i64, _i64, _i64, _i64, _i64, _i64, _p, _p, _p, _p,
                                  _i64, _f32, _i64, _f32, _p, _i64, _p, _i64]),
    "hk_prefill_attention": (_int, [_p, _i64, _p, _int, _i64, _i64, _i64, _i64, _i64, _i64, _i64, _p, _f32, _i64,
                                    _f32, _p, _i64]),
    "hk_prefill_attention_precise": (_int, [_p, _i64, _p, _int, _i64, _i64, _i64, _i64, _i64, _i64, _i64, _p, _f32,
                                            _i64, _f32, _p, _i64]),
    "hk_set_row_groups": (None, [_int]),
    "hk_kv_write": (None, [_p, _i64, _i64, _p, _p, _int, _i64, _i64]),
    "hk_kvq_attention": (_int, [_p, _i64, _int, _int, _p, _p, _i64, _p, _i64, _i64, _i64, _i64, _i64, _i64,
                                _p, _p, _p, _p, _i64, _p, _p, _i64, _int, _f32, _i64, _f32, _p, _i64]),
    "hk_hadamard": (_int, [_p, _i64, _i64, _i64, _i64, _p, _i64]),
    "hk_delta_net": (_int, [_p, _p, _p, _p, _i64, _i64, _p, _p, _p, _p, _p, _p, _p, _p, _f32, _i64, _i64, _i64, _i64,
                            _i64, _p, _i64]),
    "hk_kvarn_encode": (None, [_p, _i64, _i64, _i64, _i64, _int, _int, _int, _f32, _f32, _f32, _f32, _p, _p, _p,
                               _p]),
}
"""Every library entry point's C signature in ctypes types (fused_layer.LAYER_SIGNATURES: the layer's)."""


def _declare(so: ctypes.CDLL, library: Library) -> None:
    """Signatures of the library's entry points (fused_layer.py declares the layer ones); a missing
    one is an error at load, not at first use."""
    wanted = {"hk_abi_version", "hk_cpu_ok", "hk_set_tier"}.union(*(CAPABILITIES[c] for c in library.provides))
    for name in sorted(wanted):
        fn = getattr(so, name)  # AttributeError: the library lacks an entry point it claims
        if name in SIGNATURES:
            fn.restype, fn.argtypes = SIGNATURES[name]


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def _f32_rows(x: torch.Tensor) -> torch.Tensor:
    """The kernels read f32 rows with unit stride along the last dim (any row stride)."""
    return x if x.dtype == torch.float32 and x.stride(-1) == 1 else x.float().contiguous()


def _rows(x: torch.Tensor) -> torch.Tensor:
    """f32 or bf16 rows with unit stride along the last dim (any row stride)."""
    ok = x.dtype in (torch.float32, torch.bfloat16) and x.stride(-1) == 1
    return x if ok else x.float().contiguous()


class NativeMatmul:
    """y = x @ W.T for weights given as GGUF blocks: uint8 [rows, row_bytes] tensors (memmap views),
    several side by side (fused q|k|v). The tensors are kept referenced; the C++ plan holds their
    pointers, so a call passes only x and y."""

    def __init__(self, weights: list[tuple[torch.Tensor, int]], k: int, gemm_min_rows: int = 0,
                 so: ctypes.CDLL | None = None):
        """gemm_min_rows: from this many rows on, the C++ side multiplies on AMX bf16 tiles (x rounded
        to bf16, W expanded per call) instead of 8-bit activations; 0 = never (without AMX: the int8
        GEMMs at every size). so: another tier's library (open_tier) instead of the selected one, for
        the matmul alone."""
        self.lib = so or lib()
        assert self.lib is not None
        self.weights = [w for w, _ in weights]  # keeps the memory alive
        self.k, self.n = k, sum(w.shape[0] for w in self.weights)
        n = len(weights)
        self.plan = self.lib.hk_plan_new(n, (_p * n)(*[w.data_ptr() for w in self.weights]),
                                         (_int * n)(*[int(q) for _, q in weights]),
                                         (_i64 * n)(*[w.shape[0] for w in self.weights]),
                                         (_i64 * n)(*[w.stride(0) for w in self.weights]), k, gemm_min_rows)
        if not self.plan:
            raise ValueError(f"native kernels cannot read {[QTYPES.get(int(q), q) for _, q in weights]} "
                             f"with in_features {k}")
        # not __del__: a finalizer object frees the plan once, and none runs for a half-built plan; not at exit,
        # where hearth.layers.huge_pages' thread may still rebase it
        self._free = weakref.finalize(self, self.lib.hk_plan_free, self.plan)
        self._free.atexit = False

    def rebase(self, i: int, w: torch.Tensor) -> None:
        """Weights i are now read from w: the same bytes and layout elsewhere (a call running meanwhile, on
        another thread, may read either)."""
        old = self.weights[i]
        assert w.shape == old.shape and w.stride() == old.stride() and w.dtype == old.dtype
        self.weights[i] = w
        self.lib.hk_plan_rebase(self.plan, i, w.data_ptr())

    def __call__(self, x: torch.Tensor, out: torch.Tensor | None = None, norm: torch.Tensor | None = None,
                 eps: float = 0.0, bias: torch.Tensor | None = None) -> torch.Tensor:
        """x: f32 or bf16 [M, K] (rows may be strided) -> f32 [M, N] (or into `out`, rows may be
        strided). norm: RMSNorm weight f32 [K] applied to x's rows first; bias: f32 [N] added after."""
        x = _rows(x)
        m = x.shape[0]
        y = torch.empty(m, self.n) if out is None else out
        self.lib.hk_linear(self.plan, x.data_ptr(), int(x.dtype == torch.bfloat16), m, x.stride(0), _ptr(norm),
                           eps, _ptr(bias), y.data_ptr(), y.stride(0))
        return y

    def gemm_bf16(self, x: torch.Tensor) -> torch.Tensor | None:
        """x: bf16 [M, K] (rows may be strided) -> f32 [M, N] on AMX bf16 tiles, W expanded panel by
        panel (csrc/gemm_bf16.h); None where that does not run (no AMX-BF16, K % 32 != 0)."""
        if not has("bf16_tiles"):
            return None
        y = torch.empty(x.shape[0], self.n)
        rc = self.lib.hk_gemm_bf16(self.plan, x.data_ptr(), x.shape[0], x.stride(0), y.data_ptr(), y.stride(0))
        return y if rc == 0 else None

    def add_to(self, x: torch.Tensor, r: torch.Tensor, post_norm: torch.Tensor | None = None,
               eps: float = 0.0) -> torch.Tensor:
        """r += rmsnorm(x @ W.T) (the norm only with post_norm): r f32 [M, N], contiguous rows."""
        x = _f32_rows(x)
        self.lib.hk_linear_residual(self.plan, x.data_ptr(), x.shape[0], x.stride(0), _ptr(post_norm), eps,
                                    r.data_ptr(), r.stride(0))
        return r


ACTIVATIONS = {"silu": 0, "gelu_tanh": 1}


def mlp_add_to(gate_up: NativeMatmul, down: NativeMatmul, activation: str, r: torch.Tensor,
               norm: torch.Tensor | None, eps: float, post_norm: torch.Tensor | None, post_eps: float) -> torch.Tensor:
    """The MLP block on the residual stream r (f32 [M, hidden], unit stride), in place:
    r += rmsnorm_post(down(act(gate) * up)) with gate | up = gate_up(rmsnorm(r))."""
    gate_up.lib.hk_mlp(gate_up.plan, down.plan, ACTIVATIONS[activation], r.data_ptr(), r.shape[0], r.stride(0),
                       _ptr(norm), eps, _ptr(post_norm), post_eps)
    return r


def moe(gate_up: NativeMatmul, down: NativeMatmul, n_expert: int, activation: str, x: torch.Tensor,
        weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """A MoE block's routed experts in one call (csrc/moe.h): gate_up over the stacked gate and up tensors
    (two weights, [n_expert * inter, hidden] each), down over the stacked down tensor ([n_expert * hidden,
    inter]); x: f32 or bf16 [T, hidden]; weights: [T, k], ids: int [T, k] (the router's) -> f32 [T, hidden],
    sum_j weights[t, j] * expert_{ids[t, j]}(x[t]) in ascending expert order."""
    x, ids = _f32_rows(x), ids.to(torch.int64).contiguous()
    weights = weights.to(torch.float32).contiguous()
    out = torch.empty(x.shape[0], down.n // n_expert)
    rc = gate_up.lib.hk_moe(gate_up.plan, down.plan, n_expert, ACTIVATIONS[activation], x.data_ptr(), x.shape[0],
                            x.stride(0), ids.data_ptr(), weights.data_ptr(), ids.shape[1], out.data_ptr(), out.stride(0))
    if rc == -2:
        raise IndexError(f"expert id out of range [0, {n_expert})")
    if rc:
        raise ValueError(f"hk_moe: plans of {gate_up.n} and {down.n} rows are not {n_expert} experts' "
                         "gate | up and down")
    return out


def qk_rope(qk: torch.Tensor, rot: int, cos: torch.Tensor, sin: torch.Tensor, neox: bool,
            norm: torch.Tensor | None = None, eps: float = 0.0) -> torch.Tensor:
    """qk: f32 [T, heads, D] (heads and dims contiguous; rows may be strided), in place: per-head
    RMSNorm (norm: [heads, D]) then rotary embedding of the first rot dims; cos, sin: f32 [T, rot/2]."""
    T, heads, d = qk.shape
    assert qk.stride(2) == 1 and qk.stride(1) == d and cos.is_contiguous() and sin.is_contiguous()
    lib().hk_qk_rope(qk.data_ptr(), T, qk.stride(0), heads, d, rot, _ptr(norm), eps, cos.data_ptr(),
                     sin.data_ptr(), int(neox))
    return qk


def dequant_rows(w: torch.Tensor, qtype: int, k: int, ids: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rows `ids` (int64 [T]) of a [V, K] GGUF tensor (uint8 [V, row_bytes]) -> f32 [T, K] (or into
    `out`, contiguous)."""
    if ids.dim() != 1 or ids.dtype != torch.int64 or not ids.is_contiguous():  # a step's ids are (no view op then)
        ids = ids.reshape(-1).to(torch.int64).contiguous()
    out = torch.empty(ids.shape[0], k) if out is None else out
    assert out.is_contiguous() and out.shape == (ids.shape[0], k) and out.dtype == torch.float32
    rc = lib().hk_dequant_rows(w.data_ptr(), int(qtype), w.stride(0), k, w.shape[0], ids.data_ptr(),
                               ids.shape[0], out.data_ptr())
    if rc == -2:
        raise IndexError(f"token id out of range [0, {w.shape[0]})")
    if rc:
        raise RuntimeError("hk_dequant_rows: unsupported tensor type")
    return out


def dequant_bf16(w: torch.Tensor, qtype: int, k: int, rows: slice, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rows `rows` of a [N, K] GGUF tensor -> bf16 [len(rows), K] (for a dense matmul)."""
    start, stop, _ = rows.indices(w.shape[0])
    out = torch.empty(stop - start, k, dtype=torch.bfloat16) if out is None else out
    if lib().hk_dequant_bf16(w.data_ptr(), int(qtype), w.stride(0), k, start, stop, out.data_ptr()):
        raise RuntimeError("hk_dequant_bf16: unsupported tensor type or shape")
    return out


KV_DTYPES = (torch.float16, torch.bfloat16)


def paged_attention(q: torch.Tensor, kv_cache: torch.Tensor, q_start: torch.Tensor, q_len: torch.Tensor,
                    seq_lens: torch.Tensor, tables: torch.Tensor, scale: float, window: int, softcap: float,
                    out: torch.Tensor, tree: torch.Tensor | None = None) -> bool:
    """Attention of S sequences' query rows over an f16/bf16 paged cache, into `out`; False (out
    untouched) for a head_dim or grouping the kernel does not cover.
    q, out: f32 [rows, heads, d] (heads and dims contiguous, rows may be strided); kv_cache: [2,
    num_blocks, block_size, kv_heads, d]; q_start, q_len, seq_lens: int64 [S] (sequence s's rows
    are q_start[s] .. + q_len[s], the last of its seq_lens[s] tokens); tables: int64 [S, max_blocks];
    tree: a token tree's rows, AttentionMetadata.tree_rows() (None: no tree)."""
    _, nb, bs, kvh, d = kv_cache.shape
    heads = q.shape[1]
    assert q.stride(2) == 1 and q.stride(1) == d and out.stride(2) == 1 and out.stride(1) == d
    rc = lib().hk_paged_attention(q.data_ptr(), q.stride(0), kv_cache.data_ptr(), int(kv_cache.dtype == torch.bfloat16),
                                  nb * bs, bs, heads, kvh, d, q_start.shape[0], q_start.data_ptr(), q_len.data_ptr(),
                                  seq_lens.data_ptr(), tables.data_ptr(), tables.stride(0), scale, window, softcap,
                                  out.data_ptr(), out.stride(0), _ptr(tree), 0 if tree is None else tree.stride(0))
    return rc == 0


@functools.cache
def paged_attention_covers(heads: int, kv_heads: int, head_dim: int) -> bool:
    """Whether paged_attention takes this head shape (head_dim 16 or 48 it does not: attention then runs
    torch's, which sums a verify row unlike a decode row): a 1-row call over a 1-block f16 cache."""
    if not has("paged_attention") or kv_heads <= 0 or heads % kv_heads:
        return False
    one, zero = torch.ones(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int64)
    cache = torch.zeros(2, 1, 16, kv_heads, head_dim, dtype=torch.float16)
    return paged_attention(torch.zeros(1, heads, head_dim), cache, zero, one, one, zero.view(1, 1), 1.0, 0, 0.0,
                           torch.empty(1, heads, head_dim))


def prefill_attention(q: torch.Tensor, kv_cache: torch.Tensor, table: torch.Tensor, ctx: int, scale: float,
                      window: int, softcap: float, out: torch.Tensor, precise: bool = False) -> bool:
    """Causal attention of one sequence's T new rows (the last T of its ctx tokens) over an f16/bf16
    paged cache on AMX bf16 tiles or AVX512-BF16 (flash_prefill()), into `out`; False (out untouched)
    where the CPU or the head shape is not covered. q, out: f32 [T, heads, d] (heads and dims contiguous, rows may be strided);
    table: int64 [blocks], the sequence's block ids. precise: near-f32 scores (attention.PRECISE_SCORES),
    q and k split into bf16 high and low parts: AVX512-BF16 only (AMX tiles decline)."""
    if not has("bf16_tiles"):
        return False
    _, nb, bs, kvh, d = kv_cache.shape
    assert q.stride(2) == 1 and q.stride(1) == d and out.stride(2) == 1 and out.stride(1) == d
    fn = lib().hk_prefill_attention_precise if precise else lib().hk_prefill_attention
    rc = fn(q.data_ptr(), q.stride(0), kv_cache.data_ptr(), int(kv_cache.dtype == torch.bfloat16), nb * bs, bs,
            q.shape[1], kvh, d, q.shape[0], ctx, table.data_ptr(), scale, window, softcap, out.data_ptr(), out.stride(0))
    return rc == 0


def kv_write(kv: torch.Tensor, slots: torch.Tensor, kv_cache: torch.Tensor) -> None:
    """kv: f32 [T, 2 * kv_heads * d] (k then v per row; rows may be strided) -> cache slots (int64 [T])
    of an f16/bf16 kv_cache [2, num_blocks, block_size, kv_heads, d], rounded to nearest even."""
    _, nb, bs, kvh, d = kv_cache.shape
    assert kv.dtype == torch.float32 and kv.stride(-1) == 1 and kv.shape[-1] == 2 * kvh * d
    lib().hk_kv_write(kv.data_ptr(), kv.stride(0), kv.shape[0], slots.data_ptr(), kv_cache.data_ptr(),
                      int(kv_cache.dtype == torch.bfloat16), nb * bs, kvh * d)


KVQ_FORMATS = NATIVE_SIDES
"""Block quantizer name (hearth.kvstore codecs' k/v .name) -> csrc/kv_decode.h's KvqFormat (from the
records of hearth.formats.kv)."""


def kvq_formats(codec) -> tuple[int, int] | None:
    """(K, V) KvqFormat of a quantized codec, or None when the native readers do not cover it."""
    kf, vf = KVQ_FORMATS.get(codec.k.name), KVQ_FORMATS.get(codec.v.name)
    return None if kf is None or vf is None else (kf, vf)


def quantized_paged_attention(q: torch.Tensor, cache, q_start: torch.Tensor, q_len: torch.Tensor,
                              seq_lens: torch.Tensor, tables: torch.Tensor, sinks: torch.Tensor,
                              fresh_refs: torch.Tensor, scale: float, window: int, softcap: float,
                              out: torch.Tensor) -> bool:
    """paged_attention over a hearth.kvstore.paged.QuantizedKVCache: its encoded blocks read in place,
    its f16 staging for each query's own block and first-block sink copies. False (out untouched) when
    the kernel does not cover the formats or head shape.
    q, out: f32 [rows, heads, d] in the model's space (rotated to the cache's and back inside; heads
    and dims contiguous, rows may be strided); q_start, q_len, seq_lens, tables as in paged_attention;
    sinks: int64 [S], the staging slot of each sequence's first-block copy or -1; fresh_refs: int64
    [S, F], StepPlan.fresh_refs of each sequence."""
    formats = kvq_formats(cache.codec)
    if formats is None:
        return False
    kf, vf = formats
    heads, d = q.shape[1], q.shape[2]
    assert q.stride(2) == 1 and q.stride(1) == d and out.stride(2) == 1 and out.stride(1) == d
    staging, fresh = cache.staging, cache.fresh
    rc = lib().hk_kvq_attention(q.data_ptr(), q.stride(0), kf, vf, cache.field_ptrs.data_ptr(),
                                staging.data_ptr(), staging.shape[1], _ptr(fresh),
                                0 if fresh is None else fresh.shape[1], cache.bs, heads, cache.kv_heads, d,
                                q_start.shape[0], q_start.data_ptr(), q_len.data_ptr(), seq_lens.data_ptr(),
                                tables.data_ptr(), tables.stride(0), sinks.data_ptr(), fresh_refs.data_ptr(),
                                fresh_refs.stride(0), int(cache.rotation is not None), scale, window, softcap,
                                out.data_ptr(), out.stride(0))
    return rc == 0


def hadamard(x: torch.Tensor) -> torch.Tensor | None:
    """x @ hearth.kvstore.kvarn.hadamard(d) over the last dim d (a power of two, 32..512) of f32 x
    [T, ..., d] (each row's trailing dims contiguous, rows may be strided), by a fast Walsh-Hadamard
    transform: no [d, d] matrix streamed through the cache. -> a new contiguous f32 tensor, or None for
    another d (the caller multiplies by the matrix: a tiny model's head dim 16 raised here)."""
    d, rows = x.shape[-1], x.reshape(x.shape[0], -1)  # a view when only the rows are strided
    assert x.dtype == torch.float32 and rows.stride(-1) == 1
    out = torch.empty(x.shape)
    if lib().hk_hadamard(rows.data_ptr(), rows.stride(0), rows.shape[0], rows.shape[1], d, out.data_ptr(),
                         rows.shape[1]):
        return None
    return out


def kv_encode(quantizer, x: torch.Tensor) -> dict | None:
    """The fields of quantizer.encode(x) for a KVarN block quantizer (hearth.kvstore.kvarn), computed
    natively (~1 ms a block and KV head instead of ~12); None for the other formats. x: [m, bs, kv_heads, d]."""
    if not isinstance(quantizer, (kvarn.KVarNKeys, kvarn.KVarNValues)):
        return None
    per_token = isinstance(quantizer, kvarn.KVarNValues)
    x = x.float().contiguous()
    m, bs, kvh, d = x.shape
    f = {name: torch.empty(m, *shape, dtype=dtype) for name, (shape, dtype) in quantizer.fields(bs, kvh, d).items()}
    scale, zero, side = (f[n] for n in ("scale", "zero", "channel_scale" if per_token else "token_scale"))
    lib().hk_kvarn_encode(x.data_ptr(), m, bs, kvh, d, quantizer.bits, int(per_token), quantizer.iterations,
                          kvarn.STD_MIN, kvarn.STD_MAX, kvarn.LOG_S_MIN, kvarn.LOG_S_MAX, f["codes"].data_ptr(),
                          scale.data_ptr(), zero.data_ptr(), side.data_ptr())
    return f


def delta_net(qkv: torch.Tensor, z: torch.Tensor, beta: torch.Tensor, alpha: torch.Tensor, qsl: torch.Tensor,
              slots: torch.Tensor, windows: torch.Tensor, states: torch.Tensor, conv_w: torch.Tensor, a: torch.Tensor,
              dt: torch.Tensor, norm_w: torch.Tensor, eps: float, k_heads: int, so: ctypes.CDLL | None = None
              ) -> torch.Tensor:
    """The Gated DeltaNet mixer (csrc/delta_net.h): qkv [T, C], z [T, v_heads * v_dim], beta, alpha [T, v_heads]
    f32, unit stride, one row stride (columns of in_proj's output); qsl int64 [S + 1], slots int64 [S]; windows
    [slots, C, K - 1] and states [slots, v_heads, k_dim, v_dim] f32 contiguous (updated in place); conv_w [C, K],
    a, dt [v_heads], norm_w [v_dim] f32 contiguous -> f32 [T, v_heads * v_dim]. so: another tier's library
    (open_tier), else the selected one's."""
    _, v_heads, k_dim, v_dim = states.shape
    ld = qkv.stride(0)
    assert all(t.dtype == torch.float32 and t.stride(-1) == 1 and t.stride(0) == ld for t in (qkv, z, beta, alpha))
    assert windows.is_contiguous() and states.is_contiguous() and qsl.dtype == slots.dtype == torch.int64
    out = torch.empty(qkv.shape[0], v_heads * v_dim)
    rc = (so or lib()).hk_delta_net(qkv.data_ptr(), z.data_ptr(), beta.data_ptr(), alpha.data_ptr(), ld, slots.shape[0],
                            qsl.data_ptr(), slots.data_ptr(), windows.data_ptr(), states.data_ptr(), conv_w.data_ptr(),
                            a.data_ptr(), dt.data_ptr(), norm_w.data_ptr(), eps, k_heads, v_heads, k_dim, v_dim,
                            conv_w.shape[1], out.data_ptr(), out.stride(0))
    if rc:
        raise ValueError(f"hk_delta_net: {v_heads} value heads over {k_heads} key heads")
    return out
