"""A Gated DeltaNet layer's mixer (hearth.layers.delta_mixer) as one native call (csrc/delta_net.h): the conv,
norms, delta rule and gated norm of every row of the step, each sequence's rows in order on its state. Why: in
torch a decode token made ~10 passes over each layer's state plus ~30 small ops; a prefill chunk took the
chunked form's triangular solves."""

from __future__ import annotations

import torch

from hearth.kernels import native
from hearth.layers.delta_mixer import delta_mix_torch


def delta_mix_native(layer, qkv: torch.Tensor, z: torch.Tensor, beta: torch.Tensor, alpha: torch.Tensor,
                     meta) -> torch.Tensor:
    """delta_mix_torch's result to f32 rounding (sums in another order); torch's where the columns do not share
    one row stride (they are views of in_proj's output rows), and in a verify step, whose rows torch records for
    the rollback (hearth.layers.delta_log; a speculating model mixes in torch throughout: hearth.llm_recurrent)."""
    if (len({t.stride(0) for t in (qkv, z, beta, alpha)}) != 1 or qkv.dtype != torch.float32
            or meta.recurrent.log is not None):
        return delta_mix_torch(layer, qkv, z, beta, alpha, meta)
    step = meta.recurrent
    windows, states = step.layer(layer.index)
    qsl = torch.tensor(meta.query_start_loc, dtype=torch.int64)
    slots = torch.tensor(step.slots, dtype=torch.int64)
    return native.delta_net(qkv, z, beta, alpha, qsl, slots, windows, states, layer.conv_w, layer.a, layer.dt,
                            layer.head_norm.weight, layer.eps, layer.shape.k_heads)
