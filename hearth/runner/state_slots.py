"""The recurrent layers' states (hearth.kvstore.recurrent) as the runner keeps them: a slot per running
sequence, zeroed where a sequence starts, and snapshots of a slot right after a block, from which a
prefix-cache hit continues (the engine's hearth.engine.state_snapshots hands out both)."""

from __future__ import annotations

from hearth.config import ModelConfig
from hearth.kvstore.recurrent import RecurrentStates, StepStates


def state_tables(cfg: ModelConfig, max_num_seqs: int, state_snapshots: int,
                 zeros) -> tuple[RecurrentStates | None, RecurrentStates | None]:
    """(states, snapshots): None each for a model without recurrent layers, snapshots None where none are kept."""
    # the recurrent layers' state, a slot per running sequence (the KV manager hands them out)
    states = (RecurrentStates(cfg, max_num_seqs, zeros) if any(cfg.recurrent_layers)
              else None)
    # copies of a sequence's state right after a block, by slot: where a prefix-cache hit starts from
    snapshots = (RecurrentStates(cfg, state_snapshots, zeros)
                 if states is not None and state_snapshots else None)
    return states, snapshots


def step_states(states: RecurrentStates, snapshots: RecurrentStates | None, seqs: list) -> StepStates:
    """The step's sequences' slots, each ready to continue: zeroed at position 0, restored from a snapshot
    on a prefix-cache hit."""
    # a sequence at position 0 starts from a zero state (new, or recomputed)
    if any(s.state_slot < 0 for s in seqs):
        raise ValueError("a sequence without a state slot reached a model with recurrent layers")
    states.reset([s.state_slot for s in seqs if s.start_pos == 0])
    restores = [(s.state_restore, s.state_slot) for s in seqs if s.state_restore >= 0]
    if restores:  # a prefix-cache hit continues from the state right after its last cached block
        if snapshots is None:
            raise ValueError("a state snapshot to restore reached a runner that keeps none")
        states.copy(snapshots, restores)
    return StepStates(states, [s.state_slot for s in seqs])


def save_snapshots(states: RecurrentStates | None, snapshots: RecurrentStates | None, seqs: list) -> list[int]:
    """After the step (its restores read first): copy the states the scheduler asked for into their snapshot
    slots (distinct: hearth.engine.state_snapshots.SnapshotIndex.reserve); returns the slots written."""
    pairs = [(s.state_slot, s.state_snapshot) for s in seqs if s.state_snapshot >= 0]
    if not pairs or snapshots is None:
        return []
    snapshots.copy(states, pairs)
    return [b for _, b in pairs]
