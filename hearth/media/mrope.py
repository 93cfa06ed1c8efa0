"""M-RoPE positions (Qwen2-VL, Qwen2.5-VL: transformers' get_rope_index, vLLM's mrope_position_delta): plain
Python over a prompt's MediaInputs.

An image of rows x cols rows (MediaInput.grid), row-major, whose first row would sit at position st as text,
has row r, col c at (t, h, w) = (st, st + r, st + c); the text after it goes on from st + max(rows, cols), not
st + rows * cols. So every token that is no image row sits at (p, p, p), p = its index + delta, delta summing
shift(m) over the images before it; a prompt chunk's positions depend only on the indices it holds."""

from __future__ import annotations

from collections.abc import Sequence

from hearth.media.inputs import MediaInput


def shift(m: MediaInput) -> int:
    """How far the positions of what follows m move from its index: max(rows, cols) - rows * cols (0: no grid)."""
    if m.grid is None:
        return 0
    rows, cols = m.grid
    return max(rows, cols) - rows * cols


def delta_before(media: Sequence[MediaInput], index: int) -> int:
    """The position delta of the token at `index` from the images that end at or before it (sorted media)."""
    return sum(shift(m) for m in media if m.end <= index)


def positions(index: Sequence[int], delta: int, media: Sequence[MediaInput]) -> tuple[list[int], list[int], list[int]]:
    """(t, h, w) of the tokens at these indices: ascending (a draft tree's nodes, past the prompt, in any order).
    delta: delta_before(the request's media, index[0]); media: its images that end after index[0], sorted (the
    runner's ScheduledSequence.media: those with a row in the chunk; a cut image's rows go on from its own offset)."""
    grids = [m for m in media if m.grid is not None]
    rows = []  # (t, h, w) per index
    k, d = 0, delta  # grids[:k] end at or before p: their shifts are in d
    for p in index:
        while k < len(grids) and grids[k].end <= p:
            d += shift(grids[k])
            k += 1
        if k < len(grids) and grids[k].offset <= p:  # row r, col c of image grids[k]
            m = grids[k]
            st = m.offset + d
            r, c = divmod(p - m.offset, m.grid[1])
            rows.append((st, st + r, st + c))
        else:
            rows.append((p + d, p + d, p + d))
    t, h, w = (list(c) for c in zip(*rows)) if rows else ([], [], [])
    return t, h, w
