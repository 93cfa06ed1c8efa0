"""Linear layers over GGUF weights that stay in their file format.

build_linear(tensor) -> QuantLinear with forward(x: [..., in_features]) -> [..., out_features] in x's
dtype (f32 in, f32 out) and `in_dtype`, the activation dtype it computes in (no cast when given it).

Each tensor type has a path: a backend passes its own table and builders (hearth.backends.cpu_linear
adds `native`, the C++ kernels on the blocks in place); the torch paths here (TORCH_PATHS, each
type's torch_path in hearth.formats.weights) are the torch backend's and the fallback of every other:
  int4     Q4_0/Q4_1/Q4_K (one 4-bit plane) and Q5_0/Q5_1/Q5_K/Q8_0 (two planes), repacked once at
           load for torch's int4pack kernel; from `gemm_min_rows` rows on, expanded to bf16 tiles.
  int8     requantized to int8 codes with a bf16 scale per row for torch's int8 kernel (lossy: the
           types whose record chooses it), expanded to bf16 tiles from `gemm_min_rows` rows on.
  bf16     16-wide sub-block types (Q2_K/Q3_K; int4pack groups are >= 32).
Repacked weights are cached on disk and mapped by the next load (hearth.layers.repack_cache).
and for every machine: bf16 for F16/BF16, f32 for F32 weights (used in place from the memmap).
The torch paths carry bf16 rounding. `LinearPolicy(exact=True)` (or HEARTH_EXACT_LINEAR=1) builds the
slow, obvious twin instead, whatever the backend: f32 math on blocks dequantized from the file at
every call.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch
from gguf import GGMLQuantizationType as Q
from torch import nn

from hearth.errors import UnsupportedError
from hearth.formats.weights import WEIGHT_FORMATS
from hearth.kernels.qmatmul import Int4Weight, dense_expansion, int4_dequant_t, int4_matmul
from hearth.layers.quant import as_bytes, dequantize, require_supported
from hearth.layers.repack import dense_bf16, int4_planes, int8_rows
from hearth.layers.residency import release_pages
from hearth.loader.gguf_loader import GGUFTensor


@dataclass(frozen=True, slots=True)
class LinearPolicy:
    exact: bool = False
    """f32 math on weights dequantized from the file at every call (reference; slow)."""
    gemm_min_rows: int = 32
    """From this many rows on, int4 weights are expanded to bf16 tiles and multiplied densely."""
    native_gemm_min_rows: int = 64
    """The same threshold for the C++ kernels: their AMX int8 tiles beat bf16 tiles up to ~64 rows."""
    gemm_chunk_rows: int = 4096
    """Output features expanded per tile on that path: bounds the temporary (a 262k-row head)."""


_policy = LinearPolicy(exact=os.environ.get("HEARTH_EXACT_LINEAR", "") == "1")


def linear_policy() -> LinearPolicy:
    return _policy


@contextmanager
def use_linear_policy(**changes) -> Iterator[LinearPolicy]:
    """Layers built inside the block follow the changed policy, e.g. use_linear_policy(exact=True)."""
    global _policy
    old, _policy = _policy, replace(_policy, **changes)
    try:
        yield _policy
    finally:
        _policy = old


class Int4Part(nn.Module):
    """4-bit planes: the int4pack kernel for few rows (its cost grows ~linearly with rows); from
    `gemm_min_rows` on, bf16 tiles of W.T expanded per call for a dense (AMX) matmul."""

    in_dtype = torch.bfloat16

    def __init__(self, w: Int4Weight, policy: LinearPolicy):
        super().__init__()
        self.w, self.out_features = w, w.n
        # the bf16 tiles need the packed layout known (hearth.kernels.qmatmul.LAYOUTS); else the kernel
        self.gemm_min_rows = policy.gemm_min_rows if dense_expansion() else 1 << 62
        self.chunk = policy.gemm_chunk_rows

    @property
    def weight_bytes(self) -> int:
        return self.w.nbytes

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [M, K] -> [M, N], in x's dtype
        xb = x.to(torch.bfloat16)
        if x.shape[0] < self.gemm_min_rows:
            y = int4_matmul(xb, self.w)
        elif self.w.n <= self.chunk:
            y = xb @ int4_dequant_t(self.w)
        else:
            y = xb.new_empty(x.shape[0], self.w.n)
            for r in range(0, self.w.n, self.chunk):
                torch.mm(xb, int4_dequant_t(self.w, slice(r, r + self.chunk)), out=y[:, r:r + self.chunk])
        return y.to(x.dtype)


class Int8Part(nn.Module):
    """int8 codes with a scale per row: torch's int8 kernel for few rows; from `gemm_min_rows` on, bf16
    tiles of W.T expanded per call (as Int4Part)."""

    in_dtype = torch.bfloat16

    def __init__(self, codes: torch.Tensor, scale: torch.Tensor, policy: LinearPolicy):
        super().__init__()
        self.codes, self.scale, self.out_features = codes, scale, codes.shape[0]  # [N, K] int8, [N] bf16
        self.gemm_min_rows, self.chunk = policy.gemm_min_rows, policy.gemm_chunk_rows

    @property
    def weight_bytes(self) -> int:
        return self.codes.nbytes + self.scale.nbytes

    def _tile_t(self, r: int) -> torch.Tensor:  # bf16 W.T of rows [r, r + chunk): [K, rows]
        return (self.codes[r:r + self.chunk].to(torch.bfloat16) * self.scale[r:r + self.chunk, None]).T

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [M, K] -> [M, N], in x's dtype
        xb = x.to(torch.bfloat16)
        if x.shape[0] < self.gemm_min_rows:
            y = torch._weight_int8pack_mm(xb, self.codes, self.scale)
        else:
            y = xb.new_empty(x.shape[0], self.out_features)
            for r in range(0, self.out_features, self.chunk):
                torch.mm(xb, self._tile_t(r), out=y[:, r:r + self.chunk])
        return y.to(x.dtype)


class DensePart(nn.Module):
    """A dense weight [N, K] in bf16 or f32; activations are cast to its dtype."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.weight, self.out_features = weight, weight.shape[0]
        self.in_dtype = weight.dtype

    @property
    def weight_bytes(self) -> int:
        return self.weight.nbytes

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [M, K] -> [M, N], in x's dtype
        return (x.to(self.weight.dtype) @ self.weight.T).to(x.dtype)


class ReferencePart(nn.Module):
    """Exact: dequantizes row chunks of the file's blocks at every call, then f32 matmul."""

    in_dtype = torch.float32

    def __init__(self, t: GGUFTensor, chunk_rows: int = 4096):
        super().__init__()
        self.raw, self.qtype, self.out_features = as_bytes(t.data, t.qtype), t.qtype, t.shape[0]
        self.chunk = chunk_rows

    @property
    def weight_bytes(self) -> int:
        return self.raw.nbytes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        ys = [x @ dequantize(self.raw[r:r + self.chunk], self.qtype).T
              for r in range(0, self.out_features, self.chunk)]
        return ys[0] if len(ys) == 1 else torch.cat(ys, dim=-1)


def _int4(ts: list[GGUFTensor], policy: LinearPolicy) -> nn.Module:
    part = Int4Part(int4_planes(ts), policy)
    _release(ts)
    return part


def _int8(ts: list[GGUFTensor], policy: LinearPolicy) -> nn.Module:
    part = Int8Part(*int8_rows(ts), policy)
    _release(ts)
    return part


def _bf16(ts: list[GGUFTensor], policy: LinearPolicy) -> nn.Module:
    part = DensePart(torch.cat([dense_bf16(t) for t in ts]) if len(ts) > 1 else dense_bf16(ts[0]))
    _release([t for t in ts if t.qtype != Q.BF16])  # BF16 weights are used in place
    return part


def _release(ts: list[GGUFTensor]) -> None:
    for t in ts:  # repacked: the file pages we read are not needed in our resident set any more
        release_pages(t.data)


def _f32(ts: list[GGUFTensor], policy: LinearPolicy) -> nn.Module:
    ws = [dequantize(t.data, t.qtype) for t in ts]  # F32 dequantize is a view of the memmap
    return DensePart(torch.cat(ws) if len(ws) > 1 else ws[0])


Builder = Callable[[list[GGUFTensor], "LinearPolicy"], nn.Module]
BUILDERS: dict[str, Builder] = {"int4x1": _int4, "int4x2": _int4, "int8": _int8, "bf16": _bf16, "f32": _f32}
"""path -> the part it builds: the torch paths (a backend adds its own, hearth.backends.cpu_linear)."""
TORCH_PATHS: dict[Q, str] = {q: f.torch_path for q, f in WEIGHT_FORMATS.items()}
"""qtype -> path; neighbours in a fused list that share a path become one part."""
TORCH_HEAD_PATHS: dict[Q, str] = {q: f.torch_head_path(torch.backends.cpu.get_cpu_capability())
                                   for q, f in WEIGHT_FORMATS.items()}
"""qtype -> path of an output head at the ATen CPU capability this process runs
(hearth.formats.weights.HEAD_INT4_MAX_PLANES)."""


class QuantLinear(nn.Module):
    """Runs each fused part and concatenates their outputs along out_features.

    `in_dtype` is the activation dtype every part computes in (bf16 for the fast paths, f32 if any
    part is f32 or exact): a caller that hands it that dtype saves the cast. The output has the
    input's dtype (f32 in, f32 out); with a bias it is f32."""

    def __init__(self, parts: list[nn.Module], in_features: int, bias: torch.Tensor | None):
        super().__init__()
        self.parts = nn.ModuleList(parts)
        self.in_features = in_features
        self.out_features = sum(p.out_features for p in parts)
        self.bias = None if bias is None else bias.float()
        dtypes = {p.in_dtype for p in parts}
        self.in_dtype = dtypes.pop() if len(dtypes) == 1 else torch.float32
        self._one = parts[0].forward if len(parts) == 1 else None  # skips module-call overhead

    @property
    def weight_bytes(self) -> int:
        """Bytes of weight data one forward reads (the repacked copy, or the file's blocks)."""
        return sum(p.weight_bytes for p in self.parts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [..., K] -> [..., N]
        x2 = x if x.dim() == 2 else x.reshape(-1, self.in_features)
        if self._one is not None:
            y = self._one(x2)
        else:
            y = torch.cat([p(x2) for p in self.parts], dim=-1)
        if self.bias is not None:
            y = y + self.bias
        return y if x.dim() == 2 else y.view(*x.shape[:-1], self.out_features)


def _runs(ts: list[GGUFTensor], key: Callable[[GGUFTensor], str]) -> list[list[GGUFTensor]]:
    """Maximal runs of neighbours with the same key (fusing only neighbours keeps output order)."""
    runs: list[list[GGUFTensor]] = []
    for t in ts:
        if runs and key(runs[-1][0]) == key(t):
            runs[-1].append(t)
        else:
            runs.append([t])
    return runs


def build_linear(t: GGUFTensor | list[GGUFTensor], bias: torch.Tensor | None = None,
                 paths: Mapping[Q, str] = TORCH_PATHS, builders: Mapping[str, Builder] = BUILDERS) -> QuantLinear:
    """One weight, or several with the same in_features fused along out_features (q|k|v, gate|up);
    each run of neighbours with the same path (paths[qtype]) one part, built by builders[path]."""
    ts = t if isinstance(t, list) else [t]
    k = ts[0].shape[-1]
    for w in ts:
        require_supported(w.name, w.qtype)  # a clear error before any work
        if len(w.shape) != 2 or w.shape[1] != k:
            raise UnsupportedError(f"{w.name}: shape {w.shape} cannot be fused with in_features {k}")
    policy = _policy
    if policy.exact:
        return QuantLinear([ReferencePart(w) for w in ts], k, bias)
    runs = _runs(ts, lambda w: paths[w.qtype])
    parts = [builders[paths[run[0].qtype]](run, policy) for run in runs]
    return QuantLinear(parts, k, bias)
