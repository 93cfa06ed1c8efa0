"""An unusable --kv-disk-dir is one line before the weights load (it was a chained traceback after)."""

import pytest

from hearth.errors import HearthError


@pytest.mark.parametrize("where,why", [("file", "it is a file"), ("file/sub", "a folder above it is a file")])
def test_an_unusable_kv_disk_dir_is_one_line_before_the_load(where, why, tmp_path, monkeypatch):
    import hearth.llm

    (tmp_path / "file").write_text("")
    monkeypatch.setattr(hearth.llm, "load_model", lambda *a, **k: pytest.fail("loaded the weights"))
    folder = str(tmp_path / where)
    with pytest.raises(HearthError) as e:
        hearth.llm.LLM(str(tmp_path / "any.gguf"), kv_disk_dir=folder)
    assert str(e.value) == f"--kv-disk-dir {folder} is not a folder hearth can write to: {why}"
