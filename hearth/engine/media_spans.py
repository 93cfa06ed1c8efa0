"""Where a request's media rows constrain the engine's bookkeeping (plain Python, no tensors).

A bidirectional span (gemma3's image: its rows attend to each other both ways) is computed in one
step: the attention's mask pairs rows among one step's queries (AttentionMetadata.bidirectional), and
a row computed before its later partners exist would never see them. So a prefill chunk never ends
inside one, nor does a prefix-cache hit (the span's rest would be a step of its own). A block's hash
takes the digests of the media overlapping it: the K/V of image rows follow the image, not the
placeholder ids standing in for it."""

from __future__ import annotations

import struct
from collections.abc import Sequence

from hearth.media.inputs import MediaInput


def check_media(media: Sequence[MediaInput], prompt_len: int, step_budget: int, max_num_seqs: int) -> str | None:
    """Why these spans cannot go with a prompt of prompt_len tokens (None: they can): each inside the
    prompt with at least one row, sorted and disjoint, a bidirectional one fitting a step beside the
    decodes of max_num_seqs - 1 other sequences (else it waits until they all end: a span as long as
    the step would wait for every other request, and, at the head of the queue, hold up every later one)."""
    room = step_budget - (max_num_seqs - 1)
    end = 0
    for i, m in enumerate(media):
        if not isinstance(m, MediaInput):
            return f"media[{i}] is a {type(m).__name__}, not a MediaInput"
        if m.length < 1 or m.offset < 0 or m.end > prompt_len:
            return (f"media[{i}] covers prompt positions {m.offset}..{m.end - 1}, outside the prompt's "
                    f"{prompt_len} tokens" if m.length >= 1 else f"media[{i}] has {m.length} rows: give at least one")
        if m.offset < end:
            return (f"media[{i}] starts at position {m.offset}, before media[{i - 1}] ends ({end}): "
                    "sort them, no overlaps")
        if m.grid is not None and (len(m.grid) != 2 or min(m.grid) < 1 or m.grid[0] * m.grid[1] != m.length):
            return f"media[{i}] has grid {m.grid} for {m.length} rows: give (rows, cols) with rows * cols == {m.length}"
        if m.bidirectional and m.length > room:
            return (f"media[{i}] has {m.length} rows that attend to each other, more than a step computes "
                    f"beside {max_num_seqs - 1} other sequences' decodes (max_num_batched_tokens {step_budget}, "
                    f"max_num_seqs {max_num_seqs}): raise max_num_batched_tokens to at least "
                    f"{m.length + max_num_seqs - 1} or lower max_num_seqs")
        end = m.end
    return None


def chunk_tokens(media: Sequence[MediaInput], start: int, n: int) -> int:
    """Of n tokens from position start, how many to compute now: all, or those before the first
    bidirectional span the chunk would cut (0: the span comes whole in a later step)."""
    end = start + n
    for m in media:
        if m.offset >= end:
            break
        if m.bidirectional and m.offset < end < m.end:
            return max(0, m.offset - start)
    return n


def encoded_tokens(media: Sequence[MediaInput], ready: set[bytes], start: int, n: int) -> int:
    """Of n tokens from position start, those before the first image among them whose rows the runner
    has not encoded yet (0: that image starts at start; the chunk waits for its rows)."""
    for m in media:
        if m.offset >= start + n:
            break
        if m.end > start and m.digest not in ready:
            return max(0, m.offset - start)
    return n


def hit_blocks(media: Sequence[MediaInput], blocks: int, block_size: int) -> int:
    """A cached prefix of `blocks` full blocks cut back to whole blocks ending outside every
    bidirectional span (rounding down to a block may land inside an earlier span: again)."""
    while True:
        hit = blocks * block_size
        inside = [m for m in media if m.bidirectional and m.offset < hit < m.end]
        if not inside:
            return blocks
        blocks = inside[0].offset // block_size


def block_salt(media: Sequence[MediaInput], start: int, block_size: int) -> bytes:
    """What the media overlapping the block at [start, start + block_size) add to its hash: per span,
    its place relative to the block, its rows, its kind, its digest and its grid where it has one (M-RoPE's
    positions: they move every later block's K/V too, which chain this hash); b"" without any (a text block's
    hash is unchanged, so existing disk-tier files stay valid)."""
    parts = [struct.pack("<qq?", m.offset - start, m.length, m.bidirectional) + m.digest
             + (b"" if m.grid is None else struct.pack("<qq", *m.grid))
             for m in media if m.offset < start + block_size and m.end > start]
    return b"".join(parts)
