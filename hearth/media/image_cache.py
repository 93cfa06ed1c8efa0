"""The prepared images of recent requests, so a chat's image is decoded and resized once, not at every turn
(the prefix cache holds its rows' KV, but the API prepares each message's image again to place it: an
8000x8000 PNG costs seconds). Keyed by the raw bytes' sha256 and the config; bounded by the pixels' bytes,
least recently used out first. Thread-safe: the API prepares a request's images in threads."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable

MAX_BYTES = 256 * 1024 * 1024
"""Pixels kept (float32: a 896x896 gemma3 image is ~9.6 MB, an idefics3 image of 17 tiles ~53 MB)."""


class PreparedCache:
    def __init__(self, max_bytes: int = MAX_BYTES):
        self.max_bytes, self.bytes = max_bytes, 0
        self._items: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key, make: Callable[[], Any]):
        """The value kept under key, else make()'s (kept when it fits: its .pixels.nbytes counted). make runs
        outside the lock: two threads preparing the same new image both prepare it (the same result)."""
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
                return value
        value = make()
        size = value.pixels.nbytes
        if size > self.max_bytes:
            return value
        with self._lock:
            if key not in self._items:
                self._items[key] = value
                self.bytes += size
            while self.bytes > self.max_bytes:
                _, old = self._items.popitem(last=False)
                self.bytes -= old.pixels.nbytes
        return value

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.bytes = 0

    def __len__(self) -> int:
        return len(self._items)
