"""When hearth.api.model_pool unloads a model it is not asked to make room for: once idle for its
keep-alive (Ollama's keep_alive: --keep-alive, a --models entry's, a request's), or when a request asks
it to go now (keep_alive 0, `ollama stop`)."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from hearth.api.durations import spelled

if TYPE_CHECKING:
    from hearth.api.model_pool import _Slot


class KeepAlive:
    """The keep-alive half of hearth.api.model_pool's ModelPool, which mixes it in: it reads the pool's
    slots, clock, loader and lock (`_room`), and unloads through its `_unload`."""

    async def unload(self, requested: str | None) -> str | None:
        """Unload a model now, as Ollama's keep_alive 0 asks (`ollama stop`): None where it goes (now, or once
        the requests it is serving end), else why it stays (pinned, a model this server could not load again,
        one still loading), in a sentence an unload request's refusal says. The check and the unload are one
        step under the pool's lock: a load that begins while this waits for the lock is seen, never answered
        "unloaded" (checked before the wait, it was)."""
        slot = self.resolve(requested)
        async with self._room:
            if why := self._kept(slot):
                return why
            if slot.served is None:
                return None
            if slot.busy():  # it goes once its requests end, as Ollama's runner with a zero keep_alive
                slot.keep_alive = 0
                return None
            await self._unload(slot, "(keep_alive 0)")
            return None

    def _kept(self, slot: _Slot) -> str | None:
        """Why unload() leaves this model loaded; None: it goes. Read under the pool's lock."""
        if slot.spec.pinned or self.loader is None:
            return slot.spec.pinned_why or "it is pinned on this server"
        if slot.served is None and slot.loading is not None:
            return "it is still loading: ask again once it has loaded"
        return None

    def keep(self, requested: str | None, seconds: float) -> None:
        """A request's keep_alive: how long the model it named stays loaded once idle, until the next request
        that gives one (Ollama's scheduler sets its runner's session duration so); pinned models stay."""
        slot = self.resolve(requested)
        if not slot.spec.pinned:
            slot.keep_alive = seconds

    def expires_at(self, slot: _Slot) -> float | None:
        """When (Unix time) the idle check unloads it if no request comes; None: never (pinned, kept forever)."""
        if slot.spec.pinned or self.loader is None or slot.keep_alive == math.inf:
            return None
        now = self.clock()
        since = now if slot.idle_since is None or slot.busy() else slot.idle_since
        return time.time() + max(0.0, since + slot.keep_alive - now)

    async def check_idle(self) -> None:
        """Unload each model idle for its keep-alive. A model is idle from the first check that sees no request
        of it running, queued or choosing it: a request's get() marks it in use again."""
        now = self.clock()
        for slot in self.slots:
            if slot.served is None or slot.busy():
                slot.idle_since = None
                continue
            slot.idle_since = now if slot.idle_since is None else slot.idle_since
            if self._expired(slot, now):
                async with self._room:
                    if self._expired(slot, self.clock()):  # a request may have come while the lock was held
                        await self._unload(slot, f"(idle for {spelled(slot.keep_alive)}, its keep_alive)")

    def _expired(self, slot: _Slot, now: float) -> bool:
        # no await between this check and _unload's first line: a request that comes later loads it again
        return (slot.served is not None and not slot.spec.pinned and not slot.busy() and slot.idle_since is not None
                and now - slot.idle_since >= slot.keep_alive)
