"""A regex's `\\d` and `\\w` (and `\\D`, `\\W`) as ASCII classes, as JSON Schema's ECMAScript patterns,
vLLM's default backend (xgrammar), outlines and llama.cpp read them. llguidance's plain regex reads them
as Rust's Unicode classes, so guided_regex `\\d{3}-\\d{4}` let SmolLM2 write "🯸🯸🯸-🯸🯸🯸🯸" (U+1FBF8,
a segmented digit), while the same pattern in a JSON schema held to 0-9."""

from __future__ import annotations

OUTSIDE = {"d": "[0-9]", "D": "[^0-9]", "w": "[0-9A-Za-z_]", "W": "[^0-9A-Za-z_]"}
INSIDE = {"d": "0-9", "D": "[^0-9]", "w": "0-9A-Za-z_", "W": "[^0-9A-Za-z_]"}
"""Within a class: ranges, and a negation as a nested class (Rust's syntax: `[a[^0-9]]`)."""


def ascii_classes(regex: str) -> str:
    out, depth, i = [], 0, 0
    while i < len(regex):
        c = regex[i]
        if c == "\\" and i + 1 < len(regex):
            pair = regex[i:i + 2]
            out.append((INSIDE if depth else OUTSIDE).get(pair[1], pair))
            i += 2
            continue
        if c == "[":
            depth += 1
            out.append(c)
            i += 1
            if regex.startswith("^", i):
                out.append("^")
                i += 1
            if regex.startswith("]", i):  # a `]` first in a class is literal
                out.append("]")
                i += 1
            continue
        if c == "]" and depth:
            depth -= 1
        out.append(c)
        i += 1
    return "".join(out)
