"""MediaInput: one image's rows in a prompt, as the engine carries it (plain data, no torch).

The prompt holds placeholder token ids at [offset, offset + length); the runner's vision encoder turns
`pixels` into `length` rows of embeddings that replace those ids' embeddings. `digest` names the
image's content: it keys the prefix cache (two images behind the same placeholder ids never share K/V)
and the runner's encoder cache."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class MediaInput:
    offset: int
    """Prompt position of its first row."""
    length: int
    """Rows (hearth.media.images.PreparedImage.num_embeds: one piece's)."""
    digest: bytes
    """Equal digests mean equal rows (sha256 over the pixels and the encoder's config)."""
    pixels: Any
    """What the runner's encoder reads: one piece of PreparedImage.pixels (float32 [3, S, S])."""
    bidirectional: bool = False
    """The LM attends within these rows both ways (gemma3): never split across prefill chunks."""
    grid: tuple[int, int] | None = None
    """(rows, cols) of its rows, row-major (rows * cols == length): the LM's M-RoPE positions
    (hearth.media.mrope); None: one position per row, as text."""

    @property
    def end(self) -> int:
        """One past its last row's position."""
        return self.offset + self.length


def overlapping(media, start: int, end: int) -> list[MediaInput]:
    """Those of media (sorted, disjoint) with a row in positions [start, end)."""
    return [m for m in media if m.offset < end and m.end > start]
