"""Bad input to the CLI is one clear line on stderr and exit status 1, never a traceback."""

from __future__ import annotations

import os

import gguf
import pytest

from hearth.cli import main
from tests.gguf_factory import write_tiny_gguf


def run_cli(capsys, *argv) -> tuple[int, str]:
    code = main(list(argv))
    err = capsys.readouterr().err.strip()
    return code, err


def assert_one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == 1
    assert len(err.splitlines()) == 1 and err.startswith("hearth: error: "), err
    assert "Traceback" not in err
    for n in needles:
        assert n in err, err


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, "llama")
    return path


def test_missing_file(capsys, tmp_path):
    code, err = run_cli(capsys, "run", str(tmp_path / "nope.gguf"), "hi")
    assert_one_line_error(code, err, "not found", "nope.gguf")


def test_bad_magic(capsys, tmp_path):
    path = tmp_path / "bad.gguf"
    path.write_bytes(b"GGML" + os.urandom(64))
    code, err = run_cli(capsys, "run", str(path), "hi")
    assert_one_line_error(code, err, "bad magic")


def test_truncated_tensor_data(capsys, tiny):
    size = tiny.stat().st_size
    with open(tiny, "r+b") as fh:
        fh.truncate(size - 1000)
    code, err = run_cli(capsys, "run", str(tiny), "hi")
    assert_one_line_error(code, err, "truncated")


def test_truncated_header(capsys, tiny):
    with open(tiny, "r+b") as fh:
        fh.truncate(40)
    code, err = run_cli(capsys, "run", str(tiny), "hi")
    assert_one_line_error(code, err, "tiny.gguf")


def test_unknown_tensor_type(capsys, tiny):
    reader = gguf.GGUFReader(tiny, "r+")
    reader.tensors[-1].field.parts[4][0] = 99  # the tensor's ggml type id
    reader.data.flush()
    del reader
    code, err = run_cli(capsys, "run", str(tiny), "hi")
    assert_one_line_error(code, err, "99")


def test_unsupported_architecture(capsys, tmp_path):
    path = tmp_path / "mamba.gguf"
    w = gguf.GGUFWriter(str(path), "mamba")
    w.add_block_count(1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    code, err = run_cli(capsys, "run", str(path), "hi")
    assert_one_line_error(code, err, "mamba", "llama")


def test_prompt_longer_than_context(capsys, tiny):
    code, err = run_cli(capsys, "run", str(tiny), "--ctx", "8", "word " * 50)
    assert_one_line_error(code, err, "context holds 8")


def test_unknown_model_name(capsys):
    code, err = run_cli(capsys, "run", "no-such-model", "hi")
    assert_one_line_error(code, err, "no-such-model")
