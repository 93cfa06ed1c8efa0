"""The CPU backend's linear part: every GGUF block type computed by the C++ kernels
(hearth.kernels.native) on the blocks as the file has them: read in place from the memmapped file, then from
their copy in 2 MB pages once it is made (hearth.layers.huge_pages).

For few rows (decode) an integer dot product against 8-bit activations with a scale per 16 values
(ggml's scheme; llama.cpp: per 32); from `native_gemm_min_rows` rows on, bf16 tiles expanded from the
blocks per call for a dense AMX matmul (prefill). Without AMX (the avx512 tier): from 10 rows on an
int8 VNNI GEMM on codes unpacked per panel (csrc/gemm_vnni.h, the same 8-bit activations; on AMX int8
tiles, from 10 rows, per 32), prefills included (faster than AVX512-BF16 panels on every CPU measured,
docs/performance.md). Types the kernels do not read keep their torch path (hearth.layers.linear)."""

from __future__ import annotations

import functools

import torch
from gguf import GGMLQuantizationType as Q
from torch import nn

from hearth.formats.weights import WEIGHT_FORMATS
from hearth.kernels import native, tiers
from hearth.layers import huge_pages
from hearth.layers.linear import BUILDERS, TORCH_PATHS, Builder, LinearPolicy, QuantLinear, build_linear
from hearth.layers.quant import as_bytes
from hearth.loader.gguf_loader import GGUFTensor


class NativePart(nn.Module):
    """Weights of any block types, side by side, computed on their GGUF blocks in the file: the
    C++ integer GEMV below `gemm_min_rows` rows, tiles expanded per call and a dense matmul from
    there on (AMX; without it the C++ int8 GEMMs: the avx512 tier's VNNI GEMM; the avx2 library's register-blocked
    int8 GEMM, csrc/gemm_avx2.h; elsewhere (neon) a dense matmul). Computes in the tier's dense dtype on that path (bf16; f32 on avx2, whose torch has no
    fast bf16 matmul), so norms feed it that and big outputs stay in it; the GEMV reads f32 or bf16
    (`mm` gives f32 out for f32 in, with no cast at all)."""

    def __init__(self, ts: list[GGUFTensor], policy: LinearPolicy):
        super().__init__()
        self.in_dtype = getattr(torch, tiers.selected().dense_dtype)
        self.raws = [(as_bytes(t.data, t.qtype), t.qtype) for t in ts]  # views of the memmap, then moved
        self.starts = [sum(t.shape[0] for t in ts[:i]) for i in range(len(ts))]
        self.k = ts[0].shape[1]
        self.mm = native.NativeMatmul(self.raws, self.k, policy.native_gemm_min_rows)
        self.out_features = self.mm.n
        self.gemm_min_rows, self.chunk = policy.native_gemm_min_rows, policy.gemm_chunk_rows
        for i, ((raw, _), t) in enumerate(zip(self.raws, ts)):
            huge_pages.move(raw, t.data, functools.partial(self._moved, i))

    def _moved(self, i: int, w: torch.Tensor) -> None:
        self.raws[i] = (w, self.raws[i][1])
        self.mm.rebase(i, w)

    @property
    def weight_bytes(self) -> int:
        return sum(r.nbytes for r, _ in self.raws)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [M, K] -> [M, N], in x's dtype
        if (x.shape[0] < self.gemm_min_rows or native.has("many_rows")  # the C++ GEMMs
                or (native.has("gemm") and not native.bf16_tiles())):
            y = self.mm(x)  # f32
            return y if x.dtype == torch.float32 else y.to(x.dtype)
        xb, n = x.to(self.in_dtype), self.out_features
        if xb.dtype == torch.bfloat16 and xb.stride(-1) == 1 and (y := self.mm.gemm_bf16(xb)) is not None:
            return y.to(x.dtype)
        if n <= self.chunk:
            return torch.mm(xb, self._tile(0, n).T).to(x.dtype)
        y = xb.new_empty(x.shape[0], n)
        for r in range(0, n, self.chunk):
            torch.mm(xb, self._tile(r, min(n, r + self.chunk)).T, out=y[:, r:r + self.chunk])
        return y.to(x.dtype)

    def _tile(self, r0: int, r1: int) -> torch.Tensor:
        """Output features r0 .. r1 (across the fused weights) as W[r0:r1] in in_dtype: [r1 - r0, K]."""
        out = torch.empty(r1 - r0, self.k, dtype=self.in_dtype)
        for (raw, q), start in zip(self.raws, self.starts):
            a, b = max(r0, start), min(r1, start + raw.shape[0])
            if a >= b:
                continue
            if self.in_dtype == torch.bfloat16:
                native.dequant_bf16(raw, q, self.k, slice(a - start, b - start), out=out[a - r0:b - r0])
            else:
                native.dequant_rows(raw, q, self.k, torch.arange(a - start, b - start), out=out[a - r0:b - r0])
        return out


def native_paths() -> dict[Q, str]:
    """qtype -> path where the C++ kernels run: "native" for the types the running tier's kernels read
    (native.qtypes()), the torch path for the others (IQ4 and MXFP4 at the amx tier)."""
    ids = native.qtypes()
    return {**TORCH_PATHS, **{q: "native" for q in WEIGHT_FORMATS if int(q) in ids}}


NATIVE_BUILDERS: dict[str, Builder] = {**BUILDERS, "native": NativePart}


def native_linear(t: GGUFTensor | list[GGUFTensor], bias: torch.Tensor | None = None) -> QuantLinear:
    return build_linear(t, bias, native_paths(), NATIVE_BUILDERS)


def native_part(lin: QuantLinear) -> NativePart | None:
    """The linear's one part when the C++ kernels compute all of it, else None."""
    return lin.parts[0] if len(lin.parts) == 1 and isinstance(lin.parts[0], NativePart) else None
