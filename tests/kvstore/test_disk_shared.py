"""The disk tier shared by several engines (a cluster's replicas): each owner writes and evicts only
its own folder within its own budget; a block another owner wrote is found and read; no owner ever
deletes another's file, whether by eviction, a corrupt read or a restart's scan."""

from __future__ import annotations

from tests.kvstore.test_disk_store import SMALL, files, key, payload, store, written


def test_an_owner_reads_what_another_wrote(tmp_path):
    a = written(store(tmp_path, owner="r0"), (1, payload(1)), (2, payload(2)))
    b = store(tmp_path, owner="r1")
    assert b.contains(key(1)) and not b.contains(key(3))
    assert [bytes(p) for p in b.get_many([key(1), key(2), key(3)])] == [payload(1), payload(2)]
    assert b.stats.hits == 2 and b.stats.files == 0  # read from r0's folder, not copied
    assert files(a) == {key(1), key(2)} and files(b) == set()


def test_eviction_stays_within_each_owners_budget_and_never_crosses(tmp_path):
    a = written(store(tmp_path, space=2 * SMALL, owner="r0"), *[(i, payload(i)) for i in range(1, 5)])
    b = store(tmp_path, space=2 * SMALL, owner="r1")
    written(b, *[(i, payload(i)) for i in range(10, 15)])
    assert len(files(a)) == 2 and len(files(b)) == 2  # each within its own two files
    assert files(a) == {key(3), key(4)}  # b's five writes evicted none of a's
    assert b.stats.evictions == 3 and a.stats.evictions == 2


def test_a_corrupt_file_of_another_owner_is_skipped_not_deleted(tmp_path):
    a = written(store(tmp_path, owner="r0"), (1, payload(1)))
    path = a.path(key(1))
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    b = store(tmp_path, owner="r1")
    assert b.get(key(1)) is None and b.stats.corrupt == 1
    assert path.exists()  # its owner deletes it when it reads it
    assert a.get(key(1)) is None and not path.exists()


def test_a_restarted_owner_indexes_only_its_own_folder(tmp_path):
    written(store(tmp_path, owner="r0"), (1, payload(1)))
    written(store(tmp_path, space=SMALL, owner="r1"), (2, payload(2)))
    again = store(tmp_path, space=SMALL, owner="r1")  # its scan finds only key(2): nothing to evict
    assert again.stats.files == 1 and again.stats.evictions == 0
    assert bytes(again.get(key(1))) == payload(1)


def test_unshared_stores_keep_the_old_layout(tmp_path):
    s = written(store(tmp_path), (1, payload(1)))
    assert s.dir == tmp_path / "blocks" and not store(tmp_path, owner="r1").dir.samefile(s.dir)
