"""Draft trees as the runner reads them (ScheduledSequence.spec_parents: node c's parent, -1 for
the first level): each node's path and depth, and the K/V moves that put an accepted path where a
decode would have written it."""

from __future__ import annotations

import torch


def node_paths(parents: list[int]) -> list[list[int]]:
    """Each tree node's path: the nodes from the first level down to it."""
    paths: list[list[int]] = []
    for c, p in enumerate(parents):
        paths.append((paths[p] if p >= 0 else []) + [c])
    return paths


def depths(parents: list[int]) -> list[int]:
    return [len(path) for path in node_paths(parents)]


def tree_moves(base: int, path: list[int], table: list[int], bs: int) -> list[tuple[int, int]]:
    """(source, destination) flat cache slots that put an accepted tree path's K/V where a decode
    would have: node c, written at position base + c, at depth d + 1 belongs at base + d."""
    slot = lambda p: table[p // bs] * bs + p % bs  # noqa: E731
    return [(slot(base + c), slot(base + d)) for d, c in enumerate(path) if c != d]


def move_path(kv_caches: list, block_size: int, s, path: list[int]) -> None:
    """The accepted path's K/V from its nodes' slots to the path's positions (node c sat at base
    + c, its depth d puts it at base + d - 1), in every layer: as a decode would have left them.
    All rows are read before any is written (a node's slot may be a later one's destination)."""
    moves = tree_moves(s.start_pos + len(s.token_ids), path, s.block_ids, block_size)
    if not moves:
        return
    src = torch.tensor([a for a, _ in moves])
    dst = torch.tensor([b for _, b in moves])
    for kv in kv_caches:  # [parts, num_blocks, block_size, heads, dim] (LayerCache)
        flat = kv.flatten(1, 2)  # [parts, slots, heads, dim]; a KV-shared layer's holds 0 parts
        flat.index_copy_(1, dst, flat.index_select(1, src))
