"""The recurrent layers' state (qwen35's Gated DeltaNet), one slot per running sequence.

A recurrent layer keeps no value per token: its whole history is a conv window and a delta-rule state, megabytes
per sequence and layer, so the paged cache cannot hold it. The KV manager hands each running request a slot
from a pool of max_num_seqs (hearth.engine.kv_cache_manager); the runner owns these tensors and zeroes a slot
when its sequence's step starts at position 0 (a new request, or one recomputed after preemption), or copies a
snapshot into it on the first step after a prefix-cache hit; a chunk or a decode continues from what the slot
holds. The snapshots are a second RecurrentStates of the runner's, slots the scheduler side hands out by block
hash (hearth.engine.state_snapshots)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from hearth.config import ModelConfig, RecurrentShape
from hearth.kvstore.paged import lazy_zeros


class RecurrentStates:
    """Per recurrent layer: conv [slots, channels, kernel - 1] and delta [slots, v_heads, k_dim, v_dim], f32."""

    def __init__(self, cfg: ModelConfig, slots: int, zeros: Callable = lazy_zeros):
        """zeros(shape, dtype): the backend's (Backend.kv_zeros: host pages resident only where written)."""
        shape: RecurrentShape = cfg.recurrent
        layers = [i for i, r in enumerate(cfg.recurrent_layers) if r]
        self.slots = slots
        self.conv = {i: zeros(shape.conv_shape(slots), torch.float32) for i in layers}
        self.delta = {i: zeros(shape.delta_shape(slots), torch.float32) for i in layers}

    def reset(self, slots: list[int]) -> None:
        """Zero these slots in every layer: their sequences start at position 0 this step."""
        if not slots:
            return
        for t in (*self.conv.values(), *self.delta.values()):
            t[slots] = 0.0

    def copy(self, src: RecurrentStates, pairs: list[tuple[int, int]]) -> None:
        """For each (src slot, slot): this slot takes src's slot's state in every layer (a snapshot saved from
        the running states, or restored into them: hearth.engine.state_snapshots)."""
        if not pairs:
            return
        frm, to = [a for a, _ in pairs], [b for _, b in pairs]
        for i in self.conv:
            self.conv[i][to] = src.conv[i][frm]
            self.delta[i][to] = src.delta[i][frm]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.conv.values(), *self.delta.values()))


@dataclass(slots=True)
class StepStates:
    """What a step's recurrent layers read and update: the states and each scheduled sequence's slot."""

    states: RecurrentStates
    slots: list[int]
    """len S: sequence i's state slot."""
    log: object | None = None
    """A verify step's hearth.layers.delta_log.VerifyLog: the sequences with drafts, whose rows the layers run
    token by token and record so the runner can keep the state after the accepted ones; None without drafts."""

    def layer(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer i's (conv, delta) tensors over every slot."""
        return self.states.conv[i], self.states.delta[i]
