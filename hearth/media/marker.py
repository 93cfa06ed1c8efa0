"""Where an image sits in a message's text before the template renders (hearth.api.media_parts writes it,
hearth.api.media_prompt splits the prompt at it; the tool guard's compaction must not cut one in half)."""

from __future__ import annotations

import re

MARKER = re.compile(r"<__hearth_image_([0-9a-f]{16})_(\d+)__>")
"""An image's place in a message's text: the request's nonce and the image's index."""


def cut_before_marker(text: str, at: int) -> int:
    """`at`, or where a marker that `at` falls inside of starts (text[:result] holds whole markers only)."""
    for m in MARKER.finditer(text, max(0, at - 64), at + 64):
        if m.start() < at < m.end():
            return m.start()
    return at
