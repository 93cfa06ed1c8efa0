"""Ways to cut a text into stream deltas: one character each, every cut in two, and random cuts."""

from __future__ import annotations

import random


def splits(text: str, seed: int = 0, n_random: int = 20) -> list[list[str]]:
    out = [list(text), [text]]
    out += [[text[:i], text[i:]] for i in range(1, len(text))]
    rng = random.Random(seed)
    for _ in range(n_random if len(text) > 1 else 0):
        cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, 8))))
        bounds = [0, *cuts, len(text)]
        out.append([text[a:b] for a, b in zip(bounds, bounds[1:])])
    return out
