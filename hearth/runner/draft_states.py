"""A recurrent draft model's states (a small qwen35 drafting for a bigger one): a slot per request it drafts for,
and a copy of each one's state taken right before its drafts are fed, restored when the target rejects one of them
(hearth.runner.drafter: the accepted ones are then re-fed). Slots are handed out least recently used first: a
request that lost its slot (more requests than max_seqs, preempted ones among them) drafts from a zeroed state,
which costs acceptance only (every draft is verified)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from hearth.config import ModelConfig
from hearth.kvstore.recurrent import RecurrentStates, StepStates


class DraftStates:
    def __init__(self, cfg: ModelConfig, max_seqs: int, zeros: Callable):
        self.states = RecurrentStates(cfg, max_seqs, zeros)
        self.kept = RecurrentStates(cfg, max_seqs, zeros)
        """Slot for slot: each request's state before its drafts were fed (keep)."""
        self.slots: OrderedDict[str, int] = OrderedDict()
        """request id -> its slot, least recently used first."""
        self.free = list(range(max_seqs))[::-1]

    def slot(self, request_id: str) -> int:
        if request_id in self.slots:
            self.slots.move_to_end(request_id)
            return self.slots[request_id]
        if not self.free:
            self.free.append(self.slots.popitem(last=False)[1])
        slot = self.slots[request_id] = self.free.pop()
        self.states.reset([slot])
        return slot

    def start(self, request_id: str, zeroed: bool) -> None:
        """The request's draft K/V start over (zeroed: from position 0): so does its state."""
        slot = self.slot(request_id)
        if zeroed:
            self.states.reset([slot])

    def step(self, request_ids: list[str]) -> StepStates:
        """A draft forward's states: each batch entry's request's slot."""
        return StepStates(self.states, [self.slot(r) for r in request_ids])

    def keep(self, request_ids: list[str]) -> None:
        self.kept.copy(self.states, [(s, s) for s in map(self.slot, request_ids)])

    def restore(self, request_id: str) -> None:
        if (slot := self.slots.get(request_id)) is not None:
            self.states.copy(self.kept, [(slot, slot)])

    def forget(self, request_id: str) -> None:
        if (slot := self.slots.pop(request_id, None)) is not None:
            self.free.append(slot)
