"""A step's flat batch, built from SchedulerOutput: token ids, rope positions, KV slots and the attention
metadata, with what each feature adds to it (recurrent state slots, LoRA rows, the quantized KV's staging
plan, image rows)."""

from __future__ import annotations

import torch

from hearth.kernels.attention import AttentionMetadata
from hearth.runner.messages import SchedulerOutput
from hearth.runner.rope_positions import mrope_positions
from hearth.runner.state_slots import step_states
from hearth.runner.tree_paths import depths


def step_inputs(runner, so: SchedulerOutput) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, dict]:
    """(ids [T], positions [T] (or [3, T]: M-RoPE's, for a step with image rows), the step's metadata, the
    model's extra arguments: image rows' embeds). A token's KV slot follows its index, its rope the position.
    runner: the ModelRunner whose block size, backend, states, model, staging and media the step reads."""
    ids, positions, slots, qsl, seq_lens, tables = [], [], [], [0], [], []
    trees = {}
    bs = runner.block_size
    for i, s in enumerate(so.seqs):
        n = s.num_tokens  # drafts follow the committed tokens: their K/V is written too
        ids.extend(s.token_ids + s.spec_token_ids)
        pos = range(s.start_pos, s.start_pos + n)
        slots.extend(s.block_ids[p // bs] * bs + p % bs for p in pos)
        if s.is_tree:  # K/V in node order, each node's rope position the one on its path
            trees[i] = (len(s.token_ids), s.spec_parents)
            base = s.start_pos + len(s.token_ids)
            positions.extend(range(s.start_pos, base))
            positions.extend(base - 1 + d for d in depths(s.spec_parents))
        else:
            positions.extend(pos)
        qsl.append(qsl[-1] + n)
        seq_lens.append(s.start_pos + n)
        tables.append(s.block_ids)
    meta = runner.backend.metadata(qsl, seq_lens, tables, slots, bs, trees)
    if runner.states is not None:  # recurrent layers: each sequence's state slot, ready to continue
        meta.recurrent = step_states(runner.states, runner.snapshots, so.seqs, runner.before_verify)
    if (rows := getattr(runner.model, "lora", None)) is not None:  # each sequence's adapter scales on its rows
        rows.set([tuple((s.params.lora or {}).get(j, 0.0) for j in range(rows.num_adapters)) for s in so.seqs],
                 [s.num_tokens for s in so.seqs])
    if runner.staging is not None:  # quantized KV: which blocks seal, which rows stage, how to read
        meta.kv_plan = runner.staging.plan(
            [(s.request_id, s.start_pos, s.num_tokens, s.block_ids) for s in so.seqs], qsl)
    embeds = {}
    if any(s.media for s in so.seqs):
        if runner.media is None:
            raise ValueError("a request with images reached a runner without a vision encoder")
        embeds = {"embeds": runner.media.rows(so.seqs, qsl)}
        meta.bidirectional = runner.media.bidirectional(so.seqs)
    positions = torch.tensor(positions, dtype=torch.long)
    if runner.mrope:
        positions = mrope_positions(so.seqs, positions, qsl)
    return torch.tensor(ids, dtype=torch.long), positions, meta, embeds
