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
    one row stride (they are views of in_proj's output rows). In a verify step the drafting sequences' input rows
    are kept, so the rollback runs the accepted ones again (hearth.layers.delta_log)."""
    if len({t.stride(0) for t in (qkv, z, beta, alpha)}) != 1 or qkv.dtype != torch.float32:
        return delta_mix_torch(layer, qkv, z, beta, alpha, meta)
    step = meta.recurrent
    if step.log is not None:
        step.log.redo[layer.index] = _redo(layer, qkv, z, beta, alpha, step.log.rows)
    windows, states = step.layer(layer.index)
    qsl = torch.tensor(meta.query_start_loc, dtype=torch.int64)
    slots = torch.tensor(step.slots, dtype=torch.int64)
    return _mix(layer, (qkv, z, beta, alpha), qsl, slots, windows, states)


def _mix(layer, columns, qsl, slots, windows, states) -> torch.Tensor:
    return native.delta_net(*columns, qsl, slots, windows, states, layer.conv_w, layer.a, layer.dt,
                            layer.head_norm.weight, layer.eps, layer.shape.k_heads)


def _redo(layer, qkv, z, beta, alpha, rows: list[int]):
    """redo(dst, dst_slot, at, n): the kept rows at..at+n (of rows, the drafting sequences' flat rows) mixed again
    on dst's (a RecurrentStates) slot dst_slot."""
    kept = torch.cat([t[rows] for t in (qkv, z, beta, alpha)], dim=1)  # [len(rows), ...]: one row stride
    widths = [t.shape[1] for t in (qkv, z, beta, alpha)]

    def redo(dst, dst_slot: int, at: int, n: int) -> None:
        columns = kept[at:at + n].split(widths, dim=1)
        _mix(layer, columns, torch.tensor([0, n]), torch.tensor([dst_slot]), dst.conv[layer.index],
             dst.delta[layer.index])
    return redo
