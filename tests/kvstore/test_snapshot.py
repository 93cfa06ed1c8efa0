"""Saved conversations (/slots): a snapshot restores its blocks into the disk tier under the hashes
its tokens chain to; names cannot leave the directory; another model's or a damaged file is refused."""

from __future__ import annotations

import pytest

from hearth.kvstore.block_hash import chain_hashes, root_hash
from hearth.kvstore.disk import DiskKVStore
from hearth.kvstore.disk_format import BlockFormat
from hearth.kvstore.snapshot import SnapshotError, SnapshotNameError, SnapshotNotFoundError, SnapshotStore

FMT = BlockFormat("f16", 4, 2, (64,))
ROOT = root_hash(b"model-a|f16|4")
TOKENS = list(range(100, 111))  # two full blocks of 4 and 3 tokens more


def blocks(n: int) -> list[bytes]:
    return [bytes([i]) * 64 for i in range(n)]


def stores(tmp_path, root=ROOT) -> SnapshotStore:
    return SnapshotStore(tmp_path, root, DiskKVStore(tmp_path, 1 << 20, FMT, fsync=False))


def test_restore_puts_blocks_under_their_chained_hashes(tmp_path):
    info = stores(tmp_path / "a").save("conv-1", TOKENS, blocks(2))
    assert info.num_tokens == 8 and info.path.name == "conv-1.hkv" and info.path.parent.name == "saved"
    other = stores(tmp_path / "b")
    (other.dir / "conv-1.hkv").write_bytes(info.path.read_bytes())
    got = other.restore("conv-1")
    assert got.num_tokens == 8
    hashes = chain_hashes(ROOT, TOKENS, 4)
    assert len(hashes) == 2
    assert [bytes(other.disk.get(h)) for h in hashes] == blocks(2)


@pytest.mark.parametrize("name", ["../evil", "a/b", "/etc/passwd", ".hidden", "", "x" * 129, "a\\b", "a b",
                                  "..", "café", "a\x00b"])
def test_names_that_could_leave_the_directory_are_refused(tmp_path, name):
    with pytest.raises(SnapshotNameError):
        stores(tmp_path).save(name, TOKENS, blocks(2))
    assert list((tmp_path / "saved").iterdir()) == []


def test_plain_names_are_taken(tmp_path):
    s = stores(tmp_path)
    for name in ("a", "conv.v2_final-3", "X" * 128):
        assert s.path(name).parent == s.dir.resolve()


def test_missing_foreign_and_damaged_snapshots_are_refused(tmp_path):
    s = stores(tmp_path)
    with pytest.raises(SnapshotNotFoundError):
        s.restore("nothing")
    path = stores(tmp_path, root_hash(b"model-b|f16|4")).save("theirs", TOKENS, blocks(2)).path
    with pytest.raises(SnapshotError, match="another model"):
        s.restore("theirs")
    data = bytearray(s.save("mine", TOKENS, blocks(2)).path.read_bytes())
    data[-30] ^= 1
    (s.dir / "mine.hkv").write_bytes(bytes(data))
    with pytest.raises(SnapshotError, match="checksum"):
        s.restore("mine")
    assert s.disk.stats.files == 0 and path.exists()
