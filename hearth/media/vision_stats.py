"""A served model's image counters for /metrics: images prepared for its requests (decoded, or taken from
hearth.media.images.PREPARED), and the pieces its vision tower encoded with the seconds that took (the runner
encodes an image once while its rows are cached, so these say what images cost beyond the prefix cache)."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable


class VisionStats:
    def __init__(self):
        self.prepared = self.encoded = 0
        self.encode_seconds = 0.0
        self._lock = threading.Lock()  # prepares run in the API's threads, encodes on the engine's

    def preparing(self, prepare: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
        """prepare, counted (hearth.api.media_parts.Vision.prepare)."""
        def counted(data: bytes):
            image = prepare(data)
            with self._lock:
                self.prepared += 1
            return image
        return counted

    def timed(self, encoder) -> TimedEncoder:
        return TimedEncoder(encoder, self)

    def _encoded(self, seconds: float) -> None:
        with self._lock:
            self.encoded += 1
            self.encode_seconds += seconds


class TimedEncoder:
    """A vision encoder whose encode() calls are counted and timed (the tower runs on the CPU: wall time is its
    time); anything else is the encoder's."""

    def __init__(self, encoder, stats: VisionStats):
        self.encoder, self.stats = encoder, stats

    def encode(self, pixels):
        start = time.perf_counter()
        try:
            return self.encoder.encode(pixels)
        finally:
            self.stats._encoded(time.perf_counter() - start)

    def __getattr__(self, name: str):
        return getattr(self.encoder, name)
