"""Which recurrent-state snapshots the runner holds: the prefix cache's half for a model with recurrent layers.

A recurrent layer (qwen35's Gated DeltaNet) keeps no value per token, so a cached prefix of K/V blocks is only
usable where the whole recurrent state right after its last block was kept too. The runner holds `capacity`
snapshot slots (hearth.kvstore.recurrent.RecurrentStates, a copy of one sequence's state in every recurrent layer);
this index, plain data on the scheduler side, decides which block hash each slot holds and which one an LRU
eviction reuses, as the block pool does for blocks (llama.cpp's server keeps such "context checkpoints" for
hybrid models, vLLM its mamba states at block boundaries).

The scheduler side owns the eviction, so a hit it schedules always finds its snapshot: the runner never drops
one on its own (it only overwrites the slots it is told to), and a restore is read before any save of the same
step writes (ModelRunner: restore, compute, then save). A slot handed out for a save is findable only once the
runner reports it written (RunnerOutput.snapshots); a step that fails or skips it gives it back empty."""

from __future__ import annotations

from collections import OrderedDict


class SnapshotIndex:
    def __init__(self, capacity: int):
        self.capacity = capacity
        self.held: OrderedDict[bytes, int] = OrderedDict()
        """hash -> snapshot slot holding the state right after that block; least recently used first."""
        self.free = list(range(capacity))[::-1]
        """Slots holding nothing (popped from the end: slot 0 first)."""
        self.pending: dict[int, bytes] = {}
        """slot -> hash of the saves sent in the step that runs now (findable once the runner reports them)."""
        self.evictions = 0

    def has(self, h: bytes) -> bool:
        return h in self.held

    def take(self, h: bytes) -> int:
        """The slot holding h, now the most recently used (a hit restores from it)."""
        self.held.move_to_end(h)
        return self.held[h]

    def reserve(self, h: bytes) -> int:
        """A slot for the runner to save h's state into this step (a free one, else the least recently used
        one's, whose hash is then forgotten); -1: h is held or being saved already, or there are no slots."""
        if not self.capacity or h in self.held or h in self.pending.values():
            return -1
        if self.free:
            slot = self.free.pop()
        elif self.held:
            slot = self.held.popitem(last=False)[1]
            self.evictions += 1
        else:  # every slot is being written this step
            return -1
        self.pending[slot] = h
        return slot

    def written(self, slots: list[int]) -> None:
        """The runner saved these reserved slots: their hashes are findable; any other reservation goes back."""
        for slot in slots:
            if (h := self.pending.pop(slot, None)) is not None:
                self.held[h] = slot
        self.cancel()

    def cancel(self) -> None:
        """The step's reservations were not written (it failed): their slots go back empty."""
        self.free += list(self.pending)
        self.pending.clear()

    def drop(self, h: bytes) -> None:
        """Forget h (a request's older decode snapshot, superseded by a newer one): its slot is free again."""
        if (slot := self.held.pop(h, None)) is not None:
            self.free.append(slot)
