"""Draft trees as the runner reads them (ScheduledSequence.spec_parents: node c's parent, -1 for
the first level): each node's path and depth, and the K/V moves that put an accepted path where a
decode would have written it."""

from __future__ import annotations


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
