"""Holds on a served model: answers under way that may queue more engine requests while none of theirs is
in flight (a guarded request between an attempt and its retry). The model pool counts a held model busy, as
it counts its engine's requests in flight (hearth.api.model_pool), so no other model's load or keep-alive
unloads it under the answer: the retry found the engine shut down, and the client an error event."""

from __future__ import annotations

from collections.abc import Callable


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
