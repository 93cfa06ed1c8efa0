"""The Gated DeltaNet's mixer between in_proj and out_proj, in torch (the twin of csrc/delta_net.h's
hk_delta_net, which the CPU backend runs where its library has it): the causal conv continued from each
sequence's window, then silu; q and k L2-normed per head; the gated delta rule with decay a * softplus(alpha +
dt) and write strength sigmoid(beta) on each sequence's state; each head's output RMS-normed and gated by
silu(z). hearth.models.delta_net calls it through its backend (Backend.delta_mixer)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hearth.layers.delta_rule import causal_conv_batch, causal_conv_rows, gated_delta_rule, l2_normed, row_safe


def delta_mix_torch(layer, qkv: torch.Tensor, z: torch.Tensor, beta: torch.Tensor, alpha: torch.Tensor,
                    meta) -> torch.Tensor:
    """layer: a DeltaNetLayer (its shape, eps, conv_w, a, dt, head_norm, index); qkv [T, channels], z [T, v_heads *
    v_dim], beta, alpha [T, v_heads]: in_proj's output rows; meta: the step's (its recurrent states and slots,
    updated in place) -> [T, v_heads * v_dim]."""
    T, r = qkv.shape[0], layer.shape
    step = meta.recurrent
    windows, states = step.layer(layer.index)
    qsl = meta.query_start_loc
    log = step.log  # a verify step: its drafting sequences' rows run as decode rows, recorded for the rollback
    token_steps = () if log is None else log.seqs
    if log is not None:
        log.conv_inputs(layer.index, qkv)
    if meta.is_decode:  # [T, channels]
        mixed = causal_conv_rows(qkv, windows, step.slots, layer.conv_w)
    else:
        mixed = causal_conv_batch(qkv, windows, qsl, step.slots, layer.conv_w, token_steps)
    kd = r.k_heads * r.k_dim
    q, k, v = mixed.split([kd, kd, r.v_heads * r.v_dim], dim=-1)
    rep = r.v_heads // r.k_heads  # tiled: value head j reads key head j % k_heads
    q = l2_normed(q.view(T, r.k_heads, r.k_dim), layer.eps).repeat(1, rep, 1) * r.k_dim ** -0.5
    k = l2_normed(k.view(T, r.k_heads, r.k_dim), layer.eps).repeat(1, rep, 1)
    # [T, v_heads]: the log of the state's decay, the write strength; each row's bits whatever the step's rows
    decay = layer.a * row_safe(F.softplus, alpha + layer.dt)
    beta = row_safe(torch.sigmoid, beta)
    y = gated_delta_rule(q, k, v.reshape(T, r.v_heads, r.v_dim), decay, beta, states, qsl, step.slots,
                         token_steps, None if log is None else log.keeper(layer.index))
    y = layer.head_norm(y) * F.silu(z.view(T, r.v_heads, r.v_dim))  # [T, v_heads, v_dim]
    return y.reshape(T, -1)
