"""Routers: the prefix router keys on the engine's own chained block hashes, keeps a prefix on one
replica, spreads different prefixes, passes over an overloaded replica, and moves few keys when a
replica is added; round-robin and least-loaded skip replicas that are down or full."""

from __future__ import annotations

import random

import pytest

from hearth.cluster.router import PrefixAware, ReplicaLoad, make_router
from hearth.errors import HearthError
from hearth.kvstore.block_hash import chain_hashes, root_hash

ROOT = root_hash(b"model|f16|16")


def idle(n: int) -> list[ReplicaLoad]:
    return [ReplicaLoad(True, 0, 10) for _ in range(n)]


def prompt(seed: int, n: int = 200) -> list[int]:
    return random.Random(seed).choices(range(1000), k=n)


def test_the_key_is_the_prefix_caches_hash_of_the_last_routing_block():
    router = make_router("prefix", 2, root=ROOT, block_size=16, prefix_blocks=8)
    ids = prompt(1)
    assert router.key(ids) == chain_hashes(ROOT, ids, 16)[7]
    assert router.key(ids[:40]) == chain_hashes(ROOT, ids[:40], 16)[1]  # shorter: its last full block
    assert router.key(ids[:5]) != router.key(ids[:6])  # under one block: its tokens still decide


def test_a_shared_prefix_stays_on_one_replica_and_different_prefixes_spread():
    router = make_router("prefix", 4, root=ROOT, block_size=16, prefix_blocks=8)
    shared = prompt(2, 128)
    picks = {router.pick(shared + prompt(100 + i, 50), idle(4)) for i in range(20)}
    assert len(picks) == 1
    spread = [router.pick(prompt(i), idle(4)) for i in range(200)]
    assert sorted(set(spread)) == [0, 1, 2, 3]
    assert min(spread.count(r) for r in range(4)) >= 20  # none starved (64 points per replica on the ring)


def test_an_overloaded_replica_is_passed_over_for_the_next_on_the_ring():
    def fresh():  # no memory of earlier picks: the ring decides
        return make_router("prefix", 3, root=ROOT, block_size=16, load_factor=1.25)

    ids = prompt(3)
    order = fresh().preference(fresh().key(ids))
    loads = idle(3)
    # bound: ceil(1.25 x (requests in flight + this one) / 3 replicas)
    loads[order[0]].in_flight = 4  # 4 + 1 > ceil(1.25 x 5 / 3) = 3
    assert fresh().pick(ids, loads) == order[1]
    loads[order[1]].in_flight = 4  # the next one is as loaded: the third
    assert fresh().pick(ids, loads) == order[2]
    loads = idle(3)
    loads[order[0]].in_flight = 2
    loads[order[1]].in_flight = 3  # 2 + 1 <= ceil(1.25 x 6 / 3) = 3: the preferred keeps the key
    assert fresh().pick(ids, loads) == order[0]


def test_a_conversations_next_turn_follows_its_last_turn():
    """Turn 2 extends turn 1's prompt: it goes where turn 1 went, even when turn 1 had been passed
    over to its ring's second choice by load, and a prompt sharing only the first blocks does too
    (the replica holding the longest prefix wins)."""
    router = make_router("prefix", 3, root=ROOT, block_size=16, load_factor=1.25)
    turn1 = prompt(4, 300)
    order = router.preference(router.key(turn1))
    loads = idle(3)
    loads[order[0]].in_flight = 4
    assert router.pick(turn1, loads) == order[1]
    turn2 = turn1 + prompt(5, 80)
    assert router.pick(turn2, idle(3)) == order[1]  # the ring alone would say order[0]
    assert router.pick(turn1[:40] + prompt(6, 100), idle(3)) == order[1]
    loads = idle(3)
    loads[order[1]].in_flight = 4  # too loaded now: the ring decides among the rest
    assert router.pick(turn2 + prompt(7, 20), loads) == order[0]


def test_a_turn_passed_over_by_load_leaves_the_shared_prefix_where_it_was():
    """Two conversations behind one system prompt: the second's first turn spills to the other
    replica while the prompt's home is loaded; its next turn follows it there, but a third
    conversation still goes to the home (the spill moved only the second's own blocks)."""
    router = make_router("prefix", 2, root=ROOT, block_size=16, load_factor=1.25)
    system = prompt(8, 160)
    home = router.pick(system + prompt(9, 40), idle(2))
    loads = idle(2)
    loads[home].in_flight = 3  # 3 + 1 > ceil(1.25 x 4 / 2) = 3
    other = router.pick(system + prompt(10, 40), loads)
    assert other == 1 - home
    assert router.pick(system + prompt(10, 40) + prompt(11, 60), idle(2)) == other
    assert router.pick(system + prompt(12, 40), idle(2)) == home
    loads = idle(2)
    loads[other].in_flight = 3  # the way back: the spilled conversation's blocks stay on `other`
    assert router.pick(system + prompt(10, 40) + prompt(11, 60) + prompt(13, 30), loads) == home
    assert router.pick(system + prompt(10, 40) + prompt(11, 60) + prompt(14, 30), idle(2)) == other


def test_the_memory_is_bounded():
    router = make_router("prefix", 2, root=ROOT, block_size=16, memory=50)
    for i in range(20):
        router.pick(prompt(i), idle(2))
    assert len(router._seen) == 50


def test_down_or_full_replicas_are_never_picked():
    for name in ("prefix", "round-robin", "least-loaded"):
        router = make_router(name, 3, root=ROOT, block_size=16)
        loads = idle(3)
        loads[0].up = False
        loads[1].in_flight = loads[1].capacity
        assert {router.pick(prompt(i), loads) for i in range(10)} == {2}, name
        loads[2].up = False
        assert router.pick(prompt(0), loads) is None, name


def test_round_robin_cycles_and_least_loaded_takes_the_lightest():
    rr = make_router("round-robin", 3)
    assert [rr.pick([1], idle(3)) for _ in range(6)] == [0, 1, 2, 0, 1, 2]
    ll = make_router("least-loaded", 3)
    loads = idle(3)
    loads[0].in_flight, loads[1].in_flight, loads[2].in_flight = 3, 1, 2
    assert ll.pick([1], loads) == 1


def test_adding_a_replica_moves_about_a_quarter_of_the_keys():
    three = PrefixAware(3, root=ROOT)
    four = PrefixAware(4, root=ROOT)
    keys = [three.key(prompt(i)) for i in range(400)]
    moved = sum(three.preference(k)[0] != four.preference(k)[0] for k in keys)
    assert 0.1 * len(keys) < moved < 0.4 * len(keys)  # ideal 1/4; modulo hashing would move 3/4
    assert all(four.preference(k)[0] == 3 for k in keys if three.preference(k)[0] != four.preference(k)[0])


def test_bad_router_settings():
    with pytest.raises(HearthError, match="--routing 'random'"):
        make_router("random", 2)
    with pytest.raises(HearthError, match="--load-factor"):
        make_router("prefix", 2, load_factor=0.5)
