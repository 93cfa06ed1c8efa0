"""`hearth plan org/repo:file.gguf` reads the hub file's header with Range requests, not the whole model
(hearth.loader.hub_header), against the fake hub of test_download."""

from __future__ import annotations

import pytest

from hearth.errors import DownloadError
from tests.gguf_factory import write_tiny_gguf
from tests.loader.test_download import hub  # noqa: F401 (the fake hub's fixture)

URL = "/org/repo/resolve/main/m.gguf"


def test_plan_of_a_hub_model_reads_its_header_only(hub, tmp_path, monkeypatch):
    """It downloaded the whole file into $HEARTH_HOME/hub first (40 GB for a 70B) to say whether it fits."""
    import hearth.loader.hub_header as hub_header
    from hearth.memory.model_input import model_input

    write_tiny_gguf(local := tmp_path / "m.gguf", "llama", hidden=256, ffn=1024)
    hub.files[URL] = body = local.read_bytes()
    monkeypatch.setattr(hub_header, "FIRST_BYTES", 256)  # more than one request: 256, then 1,024 more, ...
    got, want = model_input("org/repo:m.gguf", progress=False), model_input(str(local), progress=False)
    assert got.shape == want.shape and got.tensors == want.tensors
    assert "file " in got.weights_source and got.weights_source == want.weights_source  # the whole file's size
    ranges = [headers.get("Range") for _, headers in hub.requests]
    assert len(ranges) > 1 and all(ranges) and hub.sent < len(body) // 2, (ranges, hub.sent, len(body))
    assert not (tmp_path / "home" / "hub").exists()  # nothing kept: `hearth pull` fetches the model
    assert list((tmp_path / "home" / "tmp").iterdir()) == []


def test_a_downloaded_hub_model_is_read_where_it_is(hub, tmp_path):
    from hearth.memory.model_input import model_input

    stored = tmp_path / "home" / "hub" / "org" / "repo" / "m.gguf"
    stored.parent.mkdir(parents=True)
    write_tiny_gguf(stored, "llama")
    assert model_input("org/repo:m.gguf", progress=False).shape == model_input(str(stored), progress=False).shape
    assert hub.requests == []


def test_a_hub_file_that_is_not_a_gguf_is_one_line(hub):
    from hearth.memory.model_input import model_input

    hub.files[URL] = b"<html>sign in</html>"
    with pytest.raises(DownloadError, match=r"m\.gguf: what came is not a GGUF file \(it begins b'<htm'"):
        model_input("org/repo:m.gguf", progress=False)


def test_a_missing_hub_file_is_the_hub_s_404(hub):
    from hearth.memory.model_input import model_input

    with pytest.raises(DownloadError, match=r"/org/repo/resolve/main/m\.gguf: HTTP 404 .*check the org/repo"):
        model_input("org/repo:m.gguf", progress=False)
