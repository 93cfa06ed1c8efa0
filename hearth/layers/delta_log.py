"""A verify step's record of what its drafting sequences' rows folded into their Gated DeltaNet states, so the state
after any prefix of those rows can be rebuilt exactly once the target has accepted some drafts.

A recurrent layer folds every row into its sequence's state (hearth.kvstore.recurrent): a rejected draft cannot be
taken out. vLLM (Qwen3-Next's MTP) keeps the whole state after each draft position; here the step keeps, per layer,
the sequence's state before the step (one copy: the runner's `before` table) and, per row, the little the row put
in: its conv input [C] and the delta rule's decay factor [H], key [H, dk] and write [H, dv] (delta_rule.replay_);
where the native mixer ran the step, its input rows, run again on the copy (redo).
The state after the first n rows is then the copy with n rows replayed: the same elementwise ops on the same values
as the step ran, so the same bits. Qwen3.5-0.8B (18 DeltaNet layers, 16 heads of 128 x 128, 6,144 conv channels,
kernel 4): 19.3 MiB a drafting sequence for the copy, 0.7 MiB a row, where K + 1 whole states would take 116 MiB
at K = 5; nothing is replayed when every draft is accepted."""

from __future__ import annotations

from collections.abc import Callable

import torch

from hearth.layers.delta_rule import KeepRows, replay_


class VerifyLog:
    def __init__(self, seqs: list[int], qsl: list[int], before, slots: list[int]):
        """seqs: the step's sequences with drafts (their rows: the next token's, then one per draft); qsl: the
        step's row offsets; before: a RecurrentStates whose slot slots[i] holds sequence i's state before the step
        (for each i in seqs); slots: each sequence's state slot."""
        self.seqs, self.qsl, self.before, self.slots = frozenset(seqs), qsl, before, slots
        self.rows = [r for i in sorted(seqs) for r in range(qsl[i], qsl[i + 1])]
        """The kept sequences' flat rows, in order: conv_in's rows."""
        self.conv_in: dict[int, torch.Tensor] = {}
        """layer -> [len(rows), C]: those rows' conv inputs."""
        self.steps: dict[int, list[tuple[list[int], torch.Tensor, torch.Tensor, torch.Tensor]]] = {}
        """layer -> per token step t: (the flat rows it ran, factor [S, H], k [S, H, dk], delta [S, H, dv])."""
        self.redo: dict[int, Callable[[object, int, int, int], None]] = {}
        """layer -> redo(dst, dst_slot, at, n): a native mixer's run of the kept rows at..at+n again on dst's slot,
        which holds the state before them (hearth.backends.cpu_delta_net: its rows are each a token step, so the
        same call on the same values gives the same bits)."""

    def conv_inputs(self, layer: int, x: torch.Tensor) -> None:
        """x: [T, C] the step's conv inputs in this layer (the kept rows are copied out)."""
        self.conv_in[layer] = x[self.rows]

    def keeper(self, layer: int) -> KeepRows:
        steps = self.steps.setdefault(layer, [])
        return lambda rows, factor, k, delta: steps.append((rows, factor, k, delta))

    def rebuild(self, dst, dst_slot: int, i: int, n: int) -> None:
        """dst's (a RecurrentStates) slot dst_slot := sequence i's state after its first n rows this step, in every
        recurrent layer."""
        start, before = self.qsl[i], self.slots[i]
        at = self.rows.index(start)
        for layer, conv in dst.conv.items():
            if (redo := self.redo.get(layer)) is not None:
                conv[dst_slot] = self.before.conv[layer][before]
                dst.delta[layer][dst_slot] = self.before.delta[layer][before]
                redo(dst, dst_slot, at, n)
                continue
            window = self.before.conv[layer][before]  # [C, K - 1]
            x = self.conv_in[layer][at:at + n]  # [n, C]
            conv[dst_slot] = torch.cat([window, x.t()], dim=1)[:, n:]  # the last K - 1 inputs, as the step shifts
            state = dst.delta[layer][dst_slot]  # [H, dk, dv], a view: rebuilt in place
            state.copy_(self.before.delta[layer][before])
            for t, (rows, factor, k, delta) in enumerate(self.steps[layer][:n]):
                j = rows.index(start + t)
                replay_(state, factor[j], k[j], delta[j])
