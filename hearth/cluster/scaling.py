"""Changing the number of replicas while serving (POST /cluster/replicas): new replicas are placed
and loaded before the router sees them; replicas scaled away first drain (no new requests, those in
flight finish), then their actors are killed. The router is rebuilt for the new count: consistent
hashing moves only the keys of the replicas added or removed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from hearth.cluster.remote_engine import ClusterEngine, ReplicaSlot
from hearth.cluster.router import Router
from hearth.errors import HearthError


class Scaler:
    def __init__(self, engine: ClusterEngine, spawn: Callable[[int], list[tuple[object, object]]],
                 router_for: Callable[[int], Router], kill: Callable[[object], None], drain_poll_s: float = 0.05):
        """spawn(k) places and loads k replicas (blocking) -> [(handle, ReplicaInfo)]; router_for(n)
        builds the router for n replicas; kill(handle) ends an actor."""
        self.engine, self.spawn, self.router_for, self.kill = engine, spawn, router_for, kill
        self.drain_poll_s = drain_poll_s
        self._lock = asyncio.Lock()

    async def scale_to(self, n: int) -> list[str]:
        """Returns the replicas' names once the cluster has n, all loaded; one change at a time."""
        if n < 1:
            raise HearthError(f"replicas must be at least 1, not {n}")
        async with self._lock:
            slots = self.engine.slots
            if n > len(slots):
                added = await asyncio.to_thread(self.spawn, n - len(slots))
                new = [ReplicaSlot(f"r{len(slots) + i}", h, info) for i, (h, info) in enumerate(added)]
                self.engine.router = self.router_for(n)  # router first: it then sees n loads
                self.engine.slots = slots + new
            elif n < len(slots):
                leaving = slots[n:]
                for s in leaving:
                    s.draining = True
                while any(s.in_flight for s in leaving):
                    await asyncio.sleep(self.drain_poll_s)
                self.engine.slots = slots[:n]
                self.engine.router = self.router_for(n)
                for s in leaving:
                    self.kill(s.handle)
            return [s.name for s in self.engine.slots]
