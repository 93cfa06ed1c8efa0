"""Which replica serves a request: prefix-aware (consistent hashing of the prompt's chained block
hashes, bounded by load), round-robin or least-loaded. Plain Python; the ClusterEngine keeps the
load (requests it has in flight per replica) and tells the router which replicas are up."""

from __future__ import annotations

import bisect
import hashlib
import itertools
import math
from collections import OrderedDict
from dataclasses import dataclass

from hearth.errors import HearthError
from hearth.kvstore.block_hash import chain_hashes, hash_block


@dataclass(slots=True)
class ReplicaLoad:
    """What a router knows of one replica when it picks."""
    up: bool
    in_flight: int
    capacity: int
    """Most requests it takes at once (running + queued); a full replica is never picked."""

    @property
    def full(self) -> bool:
        return self.in_flight >= self.capacity


class Router:
    """Subclasses register under `name`; pick() returns an index into `loads` or None (none can take it)."""
    registry: dict[str, type[Router]] = {}
    name = ""

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        Router.registry[cls.name] = cls

    def __init__(self, num_replicas: int, root: bytes = b"", block_size: int = 16, **_):
        self.num_replicas, self.root, self.block_size = num_replicas, root, block_size

    def pick(self, prompt_token_ids: list[int], loads: list[ReplicaLoad]) -> int | None:
        raise NotImplementedError


def make_router(name: str, num_replicas: int, **kw) -> Router:
    if name not in Router.registry:
        raise HearthError(f"--routing {name!r}: choose one of {', '.join(Router.registry)}")
    return Router.registry[name](num_replicas, **kw)


def _open(loads: list[ReplicaLoad]) -> list[int]:
    return [i for i, r in enumerate(loads) if r.up and not r.full]


class RoundRobin(Router):
    name = "round-robin"

    def __init__(self, num_replicas: int, **kw):
        super().__init__(num_replicas, **kw)
        self._next = itertools.count()

    def pick(self, prompt_token_ids, loads):
        if not _open(loads):
            return None
        while True:  # terminates: at least one replica is open
            i = next(self._next) % len(loads)
            if loads[i].up and not loads[i].full:
                return i


class LeastLoaded(Router):
    name = "least-loaded"

    def pick(self, prompt_token_ids, loads):
        candidates = _open(loads)
        return min(candidates, key=lambda i: loads[i].in_flight) if candidates else None


class PrefixAware(Router):
    """The replica that was first sent the longest prefix of this prompt, by the engine's own chained
    block hashes (equal hashes, equal cached K/V): a conversation's next turn goes where its last
    turn left its KV. A prompt none of whose blocks were seen goes by consistent hashing of its key,
    the hash of its `prefix_blocks`-th full block (`vnodes` points per replica on a ring: the same
    key, the same replica, while the set of replicas stays). Either way a replica holding more than
    `load_factor` x the mean load (counting this request) is passed over (Mirrokni et al.,
    consistent hashing with bounded loads), so one hot prefix cannot pile everything on one replica;
    a request passed over takes only its own new blocks along, not the shared ones' home."""
    name = "prefix"

    def __init__(self, num_replicas: int, root: bytes = b"", block_size: int = 16, load_factor: float = 1.5,
                 prefix_blocks: int = 8, vnodes: int = 64, memory: int = 1 << 16, **kw):
        super().__init__(num_replicas, root, block_size)
        if load_factor < 1:
            raise HearthError(f"--load-factor must be at least 1, not {load_factor}")
        self.load_factor, self.prefix_blocks, self.memory = load_factor, prefix_blocks, memory
        points = [(_point(f"replica-{r}#{v}".encode()), r) for r in range(num_replicas) for v in range(vnodes)]
        points.sort()
        self._ring = [p for p, _ in points]
        self._owner = [r for _, r in points]
        self._seen: OrderedDict[bytes, int] = OrderedDict()
        """block hash -> the replica first sent a prompt with that block; the least recently seen forgotten first."""

    def key(self, prompt_token_ids: list[int]) -> bytes:
        """The ring key; a prompt shorter than one block hashes its tokens under the root."""
        head = prompt_token_ids[:self.prefix_blocks * self.block_size]
        hashes = chain_hashes(self.root, head, self.block_size)
        return hashes[-1] if hashes else hash_block(self.root, head)

    def preference(self, key: bytes) -> list[int]:
        """Replicas in ring order from the key's point, each once."""
        start = bisect.bisect(self._ring, _point(key))
        seen: list[int] = []
        for k in range(len(self._ring)):
            r = self._owner[(start + k) % len(self._ring)]
            if r not in seen:
                seen.append(r)
                if len(seen) == self.num_replicas:
                    break
        return seen

    def pick(self, prompt_token_ids, loads):
        open_ = set(_open(loads))
        if not open_:
            return None
        total = sum(loads[i].in_flight for i in range(len(loads)) if loads[i].up) + 1
        bound = math.ceil(self.load_factor * total / sum(r.up for r in loads))
        fits = [r in open_ and loads[r].in_flight + 1 <= bound for r in range(len(loads))]
        hashes = chain_hashes(self.root, prompt_token_ids, self.block_size)
        remembered = (self._seen.get(h) for h in reversed(hashes))  # deepest block first
        choice = next((r for r in remembered if r is not None and r < len(loads) and fits[r]), None)
        if choice is None:
            choice = next((r for r in self.preference(self.key(prompt_token_ids)) if fits[r]),
                          min(open_, key=lambda i: loads[i].in_flight))  # the bound always fits one
        self._remember(hashes, choice)
        return choice

    def _remember(self, hashes: list[bytes], replica: int) -> None:
        """The prompt's new blocks now live on `replica`; blocks already placed keep their replica
        (the one that computed them first), so a turn passed over by load moves only its own
        blocks, not its system prompt's home with every later conversation after it."""
        for h in hashes:
            self._seen.setdefault(h, replica)
            self._seen.move_to_end(h)
        while len(self._seen) > self.memory:
            self._seen.popitem(last=False)


def _point(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")
