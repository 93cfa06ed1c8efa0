"""The engine's LoRA adapters as requests see them (plain Python): id j is the j-th adapter loaded
(llama-server's --lora order), each with a global scale that POST /lora-adapters changes; a request's
own `lora` (SamplingParams.lora) replaces them all for that request, the adapters it does not name at 0
(llama-server's parse_lora_request). The model side: hearth.models.lora."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

from hearth.sampling_params import InvalidSamplingParams


@dataclass
class LoraAdapters:
    paths: list[str]
    scales: list[float]
    """The global scales: what a request without its own `lora` runs with."""
    keys: list[str]
    """Each file's content fingerprint: K/V computed with an adapter is cached under it, so a block is
    reused only with the same adapters at the same scales (here or in the disk tier after a restart)."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def listing(self) -> list[dict]:
        """GET /lora-adapters: llama-server's entries."""
        return [{"id": j, "path": p, "scale": s} for j, (p, s) in enumerate(zip(self.paths, self.scales))]

    def check(self, asked: dict[int, float] | None, name: str = "lora") -> dict[int, float] | None:
        """asked (id -> scale) with every id known and every scale finite, or InvalidSamplingParams(name)."""
        return check_lora(asked, len(self.paths), name)

    def resolve(self, asked: dict[int, float] | None) -> dict[int, float]:
        """Every adapter's scale for a request: its own (the rest 0), else the global ones."""
        if asked is None:
            return dict(enumerate(self.scales))
        return {j: float(asked.get(j, 0.0)) for j in range(len(self.paths))}

    def set_scales(self, asked: dict[int, float]) -> None:
        """POST /lora-adapters: the new global scales (the adapters not named at 0, as llama-server)."""
        self.check(asked, "lora-adapters")
        with self._lock:
            self.scales = [float(asked.get(j, 0.0)) for j in range(len(self.paths))]

    def cache_salt(self, scales: dict[int, float] | None) -> bytes:
        """What a request's K/V depends on beyond the model: its nonzero adapters' files and scales
        (b"": none, the base model's blocks)."""
        on = sorted((j, s) for j, s in (scales or {}).items() if s)
        return "|".join(f"{self.keys[j]}*{s!r}" for j, s in on).encode()


def check_lora(asked: dict[int, float] | None, n: int, name: str = "lora") -> dict[int, float] | None:
    """asked (id -> scale) against `n` adapters (ids 0..n-1; the server checks it before the model loads, from
    its flags): every id known and every scale finite, or InvalidSamplingParams(name)."""
    if asked is None:
        return None
    for j, s in asked.items():
        if isinstance(j, bool) or not isinstance(j, int) or not 0 <= j < n:
            known = f"ids 0..{n - 1}" if n else "no adapters (start it with --lora FILE)"
            raise InvalidSamplingParams(name, f"names adapter id {j!r}, but the server has {known}")
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s):
            raise InvalidSamplingParams(name, f"scale of adapter {j} must be a finite number, got {s!r}")
    return asked


NO_ADAPTERS = LoraAdapters([], [], [])
"""An engine's without --lora: a request naming an adapter is refused by its check."""
