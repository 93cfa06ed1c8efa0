"""The recurrent layers' states (hearth.kvstore.recurrent) as the runner keeps them: a slot per running
sequence, zeroed where a sequence starts, and snapshots of a slot right after a block, from which a
prefix-cache hit continues (the engine's hearth.engine.state_snapshots hands out both)."""

from __future__ import annotations

from collections.abc import Callable

from hearth.config import ModelConfig
from hearth.kvstore.recurrent import RecurrentStates, StepStates
from hearth.layers.delta_log import VerifyLog


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


def step_states(states: RecurrentStates, snapshots: RecurrentStates | None, seqs: list,
                before: Callable[[], RecurrentStates] | None = None) -> StepStates:
    """The step's sequences' slots, each ready to continue: zeroed at position 0, restored from a snapshot
    on a prefix-cache hit. before: the table a verify step copies its drafting sequences' states into, slot for
    slot (made at the first one), so their rows can be rolled back to the accepted ones (keep_accepted)."""
    # a sequence at position 0 starts from a zero state (new, or recomputed)
    if any(s.state_slot < 0 for s in seqs):
        raise ValueError("a sequence without a state slot reached a model with recurrent layers")
    states.reset([s.state_slot for s in seqs if s.start_pos == 0])
    restores = [(s.state_restore, s.state_slot) for s in seqs if s.state_restore >= 0]
    if restores:  # a prefix-cache hit continues from the state right after its last cached block
        if snapshots is None:
            raise ValueError("a state snapshot to restore reached a runner that keeps none")
        states.copy(snapshots, restores)
    slots = [s.state_slot for s in seqs]
    drafting = [i for i, s in enumerate(seqs) if s.spec_token_ids]
    if not drafting or before is None:
        return StepStates(states, slots)
    kept = before()
    kept.copy(states, [(slots[i], slots[i]) for i in drafting])
    qsl = [0]
    for s in seqs:
        qsl.append(qsl[-1] + s.num_tokens)
    return StepStates(states, slots, VerifyLog(drafting, qsl, kept, slots))


def keep_accepted(step: StepStates, snapshots: RecurrentStates | None, seqs: list,
                  accepted: dict[str, list]) -> list[int]:
    """After a verify step (seqs: the step's, accepted: request id -> its accepted drafts): each drafting
    sequence's slot holds the state after its next token and accepted drafts, the rejected ones' rows dropped (the
    bonus token is the next step's row); a snapshot it was to save this step takes the state after its next token
    alone, the block end it was reserved for (never a draft's). Returns the snapshot slots written."""
    log: VerifyLog | None = step.log
    if log is None:
        return []
    written = []
    for i, s in enumerate(seqs):
        if i not in log.seqs:
            continue
        n = 1 + len(accepted.get(s.request_id, []))
        if n < s.num_tokens:
            log.rebuild(step.states, s.state_slot, i, n)
        if s.state_snapshot >= 0 and snapshots is not None:
            log.rebuild(snapshots, s.state_snapshot, i, 1)
            written.append(s.state_snapshot)
    return written


def save_snapshots(states: RecurrentStates | None, snapshots: RecurrentStates | None, seqs: list,
                   done: list[int] = ()) -> list[int]:
    """After the step (its restores read first): copy the states the scheduler asked for into their snapshot
    slots (distinct: hearth.engine.state_snapshots.SnapshotIndex.reserve), but those already written (done: a
    verify step's, keep_accepted); returns the slots written, done's among them."""
    pairs = [(s.state_slot, s.state_snapshot) for s in seqs if s.state_snapshot >= 0 and s.state_snapshot not in done]
    if not pairs or snapshots is None:
        return list(done)
    snapshots.copy(states, pairs)
    return [*done, *(b for _, b in pairs)]
