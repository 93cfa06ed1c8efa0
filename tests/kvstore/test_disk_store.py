"""The KV disk tier's store: atomic checked files, nothing corrupt ever returned, eviction by
GreedyDual-Size-Frequency priority within the space budget, the index rebuilt after a restart."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from hearth.kvstore.block_hash import DIGEST
from hearth.kvstore.disk import DiskKVStore, SUFFIX
from hearth.kvstore.disk_format import CHECKSUM, HEADER, BlockFormat

P = 1000  # payload bytes of a small block
FMT = BlockFormat("f16", 16, 2, (P, 2 * P))
SMALL = HEADER.size + P + CHECKSUM  # bytes of a small block's file
BIG = HEADER.size + 2 * P + CHECKSUM


def key(i: int) -> bytes:
    return bytes([i]) * DIGEST


def payload(i: int, n: int = P) -> bytes:
    return bytes((i * 7 + j) % 251 for j in range(n))


def store(tmp_path, space=1 << 20, fmt=FMT, **kw) -> DiskKVStore:
    return DiskKVStore(tmp_path, space, fmt, fsync=False, **kw)


def written(s: DiskKVStore, *items) -> DiskKVStore:
    for i, data in items:
        assert s.put(key(i), data)
    assert s.flush(10)
    return s


def files(s: DiskKVStore) -> set[bytes]:
    return {bytes.fromhex(p.name.removesuffix(SUFFIX)) for p in s.dir.glob(f"*{SUFFIX}")}


def test_written_block_reads_back_and_no_temporary_file_is_left(tmp_path):
    s = written(store(tmp_path), (1, payload(1)))
    assert bytes(s.get(key(1))) == payload(1)
    assert s.path(key(1)).stat().st_size == SMALL
    assert [p.name for p in s.dir.iterdir()] == [f"{key(1).hex()}{SUFFIX}"]
    assert s.get(key(2)) is None and s.stats.corrupt == 0
    with pytest.raises(ValueError, match="payload"):
        s.put(key(3), b"short")


def test_failed_write_leaves_no_file(tmp_path, monkeypatch):
    s = store(tmp_path)

    def crash(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", crash)
    s.put(key(1), payload(1))
    assert s.flush(10)
    assert list(s.dir.iterdir()) == [] and not s.contains(key(1)) and s.stats.write_errors == 1


def _damage(path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "truncated":
        data = data[:len(data) // 2]
    elif how == "bit flip":
        data[HEADER.size + 10] ^= 0x01
    elif how == "checksum":
        data[-1] ^= 0xFF
    elif how == "bad magic":
        data[:4] = b"XXXX"
    elif how == "empty":
        data = bytearray()
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["truncated", "bit flip", "checksum", "bad magic", "empty"])
def test_corrupt_file_is_never_returned_and_is_deleted(tmp_path, how):
    s = written(store(tmp_path), (1, payload(1)), (2, payload(2)))
    _damage(s.path(key(1)), how)
    assert s.get(key(1)) is None
    assert s.stats.corrupt == 1 and not s.path(key(1)).exists() and not s.contains(key(1))
    assert bytes(s.get(key(2))) == payload(2)


def test_file_of_another_format_or_name_is_rejected(tmp_path):
    other = written(store(tmp_path / "other", fmt=BlockFormat("q8_0", 16, 2, (P,))), (1, payload(1)))
    s = store(tmp_path)
    os.replace(other.path(key(1)), s.path(key(1)))  # same name, foreign codec
    os.replace(written(store(tmp_path / "x"), (2, payload(2))).path(key(2)), s.path(key(3)))  # renamed
    s = store(tmp_path)  # the index sees both files
    assert s.contains(key(1)) and s.contains(key(3))
    assert s.get(key(1)) is None and s.get(key(3)) is None and s.stats.corrupt == 2
    assert files(s) == set()


def test_index_is_rebuilt_after_a_restart(tmp_path):
    s = written(store(tmp_path), *[(i, payload(i)) for i in range(5)])
    s.close()
    again = store(tmp_path)
    assert all(again.contains(key(i)) for i in range(5))
    assert again.stats.files == 5 and again.stats.bytes == 5 * SMALL
    assert [bytes(again.get(key(i))) for i in range(5)] == [payload(i) for i in range(5)]


def test_leftover_temporary_file_of_a_dead_writer_is_removed(tmp_path):
    s = store(tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    tmp = s.dir / f"{key(1).hex()}{SUFFIX}.{dead}.abc.tmp"
    tmp.write_bytes(b"half a block")
    again = store(tmp_path)
    assert not tmp.exists() and not again.contains(key(1))


def test_eviction_keeps_hit_blocks_over_recent_ones(tmp_path):
    s = written(store(tmp_path, space=3 * SMALL), (0, payload(0)), (1, payload(1)))
    for _ in range(3):
        s.get(key(0))  # 4 hits, used first
    s.get(key(1))  # 2 hits, used last
    written(s, (2, payload(2)), (3, payload(3)))
    # priorities (in units of COST / SMALL): 0 -> 4, 1 -> 2, 2 -> 1, 3 -> 1 (newer): 2 goes; LRU would drop 0
    assert files(s) == {key(0), key(1), key(3)} and s.stats.evictions == 1
    assert s.stats.bytes <= 3 * SMALL


def test_eviction_prefers_big_files_at_equal_hits(tmp_path):
    s = written(store(tmp_path, space=2 * SMALL + BIG), (0, payload(0)), (1, payload(1, 2 * P)))
    written(s, (2, payload(2)), (3, payload(3)))
    assert files(s) == {key(0), key(2), key(3)}  # the big one went, though it was not the oldest


def test_old_hits_age_out_as_new_blocks_arrive(tmp_path):
    s = written(store(tmp_path, space=2 * SMALL), (0, payload(0)))
    for _ in range(4):
        s.get(key(0))
    for i in range(1, 20):  # each eviction raises the floor new blocks start from
        written(s, (i, payload(i)))
        if not s.contains(key(0)):
            break
    assert not s.contains(key(0)) and i > 3
    assert s.stats.bytes <= 2 * SMALL


def test_eviction_after_restart_follows_last_use(tmp_path):
    s = written(store(tmp_path), *[(i, payload(i)) for i in range(3)])
    for i, age in ((0, 100), (1, 300), (2, 200)):  # 1 is the least recently used
        os.utime(s.path(key(i)), (1e9 - age, 1e9 - age))
    s.close()
    again = written(store(tmp_path, space=3 * SMALL), (3, payload(3)))
    assert files(again) == {key(0), key(2), key(3)}


def test_full_write_queue_drops_instead_of_blocking(tmp_path, monkeypatch):
    s = store(tmp_path, max_pending_bytes=2 * P)
    gate = threading.Event()
    write = s._write
    monkeypatch.setattr(s, "_write", lambda h, p: (gate.wait(10), write(h, p)))
    assert s.put(key(1), payload(1)) and s.put(key(2), payload(2))
    assert not s.put(key(3), payload(3)) and s.stats.dropped == 1
    assert s.put(key(1), payload(1))  # already queued: nothing to do
    gate.set()
    assert s.flush(10) and files(s) == {key(1), key(2)}


def test_get_many_returns_the_longest_verified_run(tmp_path):
    s = written(store(tmp_path), *[(i, payload(i)) for i in range(5)])
    _damage(s.path(key(2)), "bit flip")
    assert [bytes(p) for p in s.get_many([key(i) for i in range(5)])] == [payload(0), payload(1)]
    assert s.stats.corrupt == 1 and not s.contains(key(2))
    assert s.get_many([key(9), key(0)]) == [] and s.get_many([]) == []


def test_closed_store_drops_writes_but_still_reads(tmp_path):
    s = written(store(tmp_path), (1, payload(1)))
    s.close()
    assert not s.put(key(2), payload(2)) and s.flush(1)
    assert bytes(s.get(key(1))) == payload(1)
