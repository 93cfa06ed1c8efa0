"""LoRA adapter terms inside the fused decode stack (csrc/lora_layer.h): a step where an adapter is on
runs every layer in one C++ call as FusedStack.decode does, each of a layer's four matmuls followed by
its low-rank term with each row's scales (hearth.layers.lora's math, f32 A and B), where the op-by-op
path added ~8 Python-level ops per linear and left the fused layers altogether."""

from __future__ import annotations

import ctypes
import weakref

import torch

from hearth.kernels.fused_layer import FusedStack, _lib

_p, _i64 = ctypes.c_void_p, ctypes.c_int64

LoraParts = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
"""One linear's terms: a_t f32 [K, R], b_t f32 [R, N], the adapter of each rank column int64 [R], its
alpha / rank f32 [R], the terms' spans int64 [terms, 4] (first rank column, rank, first output, outputs)."""


class FusedLora:
    """A layer's terms as the C++ side holds them (hk_lora_new): per linear (q|k|v, o, gate|up, down)
    its LoraParts, or None where it has none."""

    def __init__(self, linears: list[LoraParts | None]):
        assert len(linears) == 4
        self.lib = _lib()
        self.parts = [p for p in linears if p is not None]  # keep the memory the C++ side points at alive
        for a, b, adapter, factor, spans in self.parts:
            assert a.dtype == b.dtype == factor.dtype == torch.float32 and adapter.dtype == spans.dtype == torch.int64
            assert all(t.is_contiguous() for t in (a, b, adapter, factor, spans))
        ptr = lambda i, j: None if linears[i] is None else linears[i][j].data_ptr()  # noqa: E731
        arrays = [(_p * 4)(*[ptr(i, j) for i in range(4)]) for j in range(5)]
        dims = [d for p in linears for d in ((0, 0, 0, 0) if p is None else
                                             (p[0].shape[0], p[1].shape[1], p[0].shape[1], p[4].shape[0]))]
        self.ptr = self.lib.hk_lora_new(*arrays, (_i64 * 16)(*dims))
        self._free = weakref.finalize(self, self.lib.hk_lora_free, self.ptr)


class FusedLoraStack:
    """A FusedStack's layers with their terms (None: a layer without any), in one call a decode step."""

    def __init__(self, stack: FusedStack, loras: list[FusedLora | None]):
        assert len(loras) == len(stack.layers)
        self.lib, self.stack, self.loras = stack.lib, stack, loras
        self.ptrs = (_p * len(loras))(*[None if lo is None else lo.ptr for lo in loras])

    def decode(self, x: torch.Tensor, tables: list[tuple[torch.Tensor, torch.Tensor]], kv_caches: list, meta,
               scales: torch.Tensor) -> int:
        """FusedStack.decode with the terms; scales: f32 [rows, adapters], one row for all or x's rows'
        (contiguous). Returns the number of layers run (0 where the step or cache is not one it covers)."""
        if scales.dtype != torch.float32 or not scales.is_contiguous() or scales.shape[0] not in (1, x.shape[0]):
            return 0
        args = self.stack.decode_args(x, tables, kv_caches, meta)
        if args is None:
            return 0
        lds = 0 if scales.shape[0] == 1 else scales.shape[1]
        return self.lib.hk_stack_forward_lora(self.stack.ptrs, self.ptrs, len(self.loras), x.data_ptr(), x.shape[0],
                                              scales.data_ptr(), lds, *args)
