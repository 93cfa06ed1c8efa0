"""Block pool reference counts, prefix hashes and LRU eviction, with exact block ids."""

import pytest

from hearth.engine.block_pool import BlockPool
from hearth.engine.kv_cache_manager import KVCacheManager, hash_block
from hearth.engine.request import Request
from hearth.sampling_params import SamplingParams

from tests.engine.test_scheduler import make_engine, run_all


def request(rid, tokens):
    return Request(rid, tokens, SamplingParams(max_tokens=4, temperature=0), frozenset(), 1000)


def test_block_pool_gives_lowest_ids_and_takes_them_back():
    pool = BlockPool(4)
    assert pool.allocate(3) == [0, 1, 2]
    assert pool.allocate(2) is None and pool.num_free == 1
    pool.free([1])
    assert pool.allocate(2) == [1, 3]  # the block just freed first: its pages are resident


def test_empty_blocks_go_before_any_cached_one_most_recent_first():
    pool = BlockPool(5)
    blocks = pool.allocate(5)
    pool.cache(blocks[0], b"h0")
    pool.cache(blocks[3], b"h3")
    pool.free([0, 1, 2, 3, 4][::-1])  # released 4, 3, 2, 1, 0
    assert pool.allocate(3) == [1, 2, 4]  # the empty ones, last released first; 0 and 3 keep their K/V
    assert pool.lookup(b"h0") == 0 and pool.lookup(b"h3") == 3
    assert pool.allocate(1) == [3] and pool.lookup(b"h3") is None  # then cached ones, LRU
    pool.reset_prefix_cache()  # block 0's K/V is forgotten: it is an empty block again
    pool.free([4])
    assert pool.allocate(2) == [4, 0]


def test_never_used_blocks_are_named_in_the_order_they_are_handed_out():
    pool = BlockPool(6)
    assert pool.untouched(4) == range(0, 4)
    assert pool.allocate(2) == [0, 1] and pool.untouched(4) == range(2, 6)
    pool.free([1, 0])
    assert pool.allocate(3) == [0, 1, 2] and pool.untouched(9) == range(3, 6)  # freed ones first
    pool.allocate(3)
    assert not pool.untouched(1)


def test_shared_block_is_free_only_when_every_holder_released_it():
    pool = BlockPool(4)
    a = pool.allocate(2)
    pool.cache(a[0], b"h0")
    pool.touch([a[0]])
    assert pool.ref_cnt[:2] == [2, 1]
    pool.free(a)
    assert pool.num_free == 3 and pool.ref_cnt[0] == 1
    pool.free([a[0]])
    assert pool.num_free == 4
    with pytest.raises(RuntimeError, match="freed twice"):
        pool.free([a[0]])


def test_free_cached_blocks_stay_findable_until_evicted_lru():
    pool = BlockPool(3)
    blocks = pool.allocate(3)
    for b in blocks:
        pool.cache(b, bytes([b]))
    pool.free([2])
    pool.free([0])
    pool.free([1])  # released order 2, 0, 1: evicted in that order
    assert [pool.lookup(bytes([b])) for b in range(3)] == [0, 1, 2]
    assert pool.allocate(1) == [2] and pool.lookup(b"\x02") is None
    pool.touch([0])  # a hit takes block 0 out of the eviction queue
    assert pool.allocate(1) == [1] and pool.lookup(b"\x00") == 0
    assert pool.allocate(1) is None


def test_block_hash_chains_parent_and_tokens():
    kv = KVCacheManager(8, block_size=2, cache_key=b"model-a|f16")
    req = request("r", [1, 2, 3, 4, 5])
    h = kv.block_hashes(req, 2)
    assert h[0] == hash_block(kv.cache_key, [1, 2]) and h[1] == hash_block(h[0], [3, 4])
    other = KVCacheManager(8, block_size=2, cache_key=b"model-b|f16")
    assert other.block_hashes(request("r", [1, 2, 3, 4]), 2)[1] != h[1]  # the key is part of it
    assert kv.block_hashes(request("s", [9, 9, 3, 4]), 2)[1] != h[1]  # so is every earlier token


def test_new_request_reuses_longest_cached_prefix():
    kv = KVCacheManager(8, block_size=2)
    a = request("a", [1, 2, 3, 4, 5])
    assert kv.allocate_slots(a, 5) and a.block_ids == [0, 1, 2]
    a.num_computed_tokens = 5
    kv.cache_full_blocks(a)  # blocks 0 and 1 are full; block 2 is not
    b = request("b", [1, 2, 3, 4, 7, 8])
    cached = kv.find_cached_prefix(b)
    assert cached == [0, 1]
    assert kv.allocate_slots(b, 2, cached)
    assert b.block_ids == [0, 1, 3] and b.num_computed_tokens == 4
    assert kv.pool.ref_cnt[:4] == [2, 2, 1, 1]
    # a prompt that is entirely cached still computes its last token
    c = request("c", [1, 2, 3, 4])
    assert kv.find_cached_prefix(c) == [0]
    kv.free(a), kv.free(b)
    assert kv.pool.num_free == 8 and kv.pool.num_cached == 2
    assert kv.stats.queries == 11 and kv.stats.hits == 4


def test_prefix_caching_off_finds_nothing():
    kv = KVCacheManager(8, block_size=2, enable_prefix_caching=False)
    a = request("a", [1, 2, 3, 4, 5])
    kv.allocate_slots(a, 5)
    a.num_computed_tokens = 5
    kv.cache_full_blocks(a)
    assert kv.find_cached_prefix(request("b", [1, 2, 3, 4, 5])) == [] and kv.pool.num_cached == 0


def test_engine_hit_gives_same_tokens_and_reports_cached_tokens():
    engine, sched, runner = make_engine(block_size=4)
    prompt = list(range(1, 12))
    engine.add_request(prompt, SamplingParams(max_tokens=5, temperature=0), "first")
    first = run_all(engine)["first"]
    engine.add_request(prompt, SamplingParams(max_tokens=5, temperature=0), "again")
    again = run_all(engine)["again"]
    assert [o.new_token_ids for o in again] == [o.new_token_ids for o in first]
    assert first[-1].num_cached_tokens == 0 and again[-1].num_cached_tokens == 8
    computed = [s for so in runner.steps for s in so.seqs if s.request_id == "again"][0]
    assert computed.start_pos == 8 and computed.token_ids == prompt[8:]
    assert sched.kv.pool.num_free == 64
