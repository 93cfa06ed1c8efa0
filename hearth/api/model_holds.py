"""Holds on a served model: requests under way that will queue engine requests while none of theirs is in
flight (a guarded request between an attempt and its retry; a request whose images load before its first;
embeddings waiting for room between waves).
The model pool counts a held model busy, as it counts its engine's requests in flight (hearth.api.model_pool),
so no other model's load or keep-alive unloads it under them: their engine requests found the engine shut
down, and the client a 503 or an error event ("the model was unloaded as this request reached it")."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Holds:
    def __init__(self):
        self.count = 0

    def take(self) -> Callable[[], None]:
        """One more hold; the function returned lets it go, once however often it is called (an answer's end
        and its client's going both abort it)."""
        self.count += 1
        held = True

        def release() -> None:
            nonlocal held
            if held:
                held = False
                self.count -= 1

        return release

    @contextmanager
    def held(self) -> Iterator[None]:
        """One hold for the block (awaits in it included)."""
        release = self.take()
        try:
            yield
        finally:
            release()
