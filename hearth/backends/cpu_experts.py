"""A MoE block's routed experts on the C++ kernels (csrc/moe.h): one plan over the stacked gate and up
tensors and one over the stacked down tensor, experts addressed by row offset inside the call, so a
layer holds two plans however many experts it has (the op-by-op twin, hearth.layers.experts, holds two
linears per expert). One call per MoE block: a decode row's k experts' gate | up in one GEMV, several
rows grouped by expert with one matmul per expert's rows (the GEMV, batch or prefill GEMMs by count)."""

from __future__ import annotations

import ctypes
import functools

import torch
from torch import nn

from hearth.kernels import native
from hearth.layers import huge_pages
from hearth.layers.quant import as_bytes
from hearth.loader.gguf_loader import GGUFTensor


def _raw(t: GGUFTensor) -> tuple[torch.Tensor, int]:
    """A stacked [n_expert, rows, K] tensor as uint8 [n_expert * rows, row_bytes] (a view of the file)."""
    return as_bytes(t.data, t.qtype), int(t.qtype)


class NativeExperts(nn.Module):
    """forward(h f32 [T, hidden], weights f32 [T, k], ids int64 [T, k]) -> f32 [T, hidden], as
    hearth.layers.experts.Experts computes it (the same GEMVs and sum order; act(gate) * up in C++)."""

    def __init__(self, gate: GGUFTensor, up: GGUFTensor, down: GGUFTensor, activation: str, gemm_min_rows: int,
                 so: ctypes.CDLL | None = None):
        """so: another tier's library (native.open_tier) instead of the selected one (tests compare tiers)."""
        super().__init__()
        self.n_expert, self.activation = gate.shape[0], activation
        # gate | up: [n_expert * expert_ffn, hidden] twice; down: [n_expert * hidden, expert_ffn]
        self.gate_up = native.NativeMatmul([_raw(gate), _raw(up)], gate.shape[2], gemm_min_rows, so)
        self.down = native.NativeMatmul([_raw(down)], down.shape[2], gemm_min_rows, so)
        for mm, ts in ((self.gate_up, (gate, up)), (self.down, (down,))):
            for i, t in enumerate(ts):
                huge_pages.move(mm.weights[i], t.data, functools.partial(mm.rebase, i))

    @property
    def weight_bytes(self) -> int:
        return sum(w.nbytes for mm in (self.gate_up, self.down) for w in mm.weights)

    def forward(self, h: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return native.moe(self.gate_up, self.down, self.n_expert, self.activation, h, weights, ids)
