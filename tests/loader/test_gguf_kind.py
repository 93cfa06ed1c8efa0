"""A LoRA adapter or a vision projector given as MODEL says what it is and where it goes: it was "metadata key
llama.block_count is missing" (plan, serve) or "tokenizer model '' (tokenizer.ggml.model) is not supported" (run)."""

import numpy as np
import pytest

from hearth.cli import main
from tests.gguf_factory import write_tiny_gguf
from tests.lora_factory import write_lora_gguf
from tests.mmproj_factory import write_settings_only


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("kinds")
    write_tiny_gguf(root / "base.gguf", "llama")
    write_lora_gguf(root / "lora.gguf", root / "base.gguf", ["blk.0.attn_q.weight"])
    write_settings_only(root / "mmproj.gguf", "gemma3", {"v.patch_embd.weight": np.zeros((4, 4), np.float32)})
    return root


@pytest.mark.parametrize("name,says", [
    ("lora.gguf", "a LoRA adapter, not a model: give it with --lora FILE, and its base model as MODEL"),
    ("mmproj.gguf", "a vision projector (mmproj), not a model: give it with --mmproj FILE, and its language model "
                    "as MODEL"),
])
@pytest.mark.parametrize("command", [["run"], ["plan", "--device", "h200"]])
def test_a_gguf_that_is_not_a_model_says_what_it_is(files, name, says, command, capsys):
    path = files / name
    assert main([command[0], str(path), *(["hi"] if command == ["run"] else command[1:])]) == 1
    assert capsys.readouterr().err == f"hearth: error: {path}: {says}\n"


def test_a_model_file_is_a_model(files, capsys):
    from hearth.loader.gguf_kind import check_model_file
    from hearth.loader.gguf_loader import GGUFFile

    check_model_file(GGUFFile(files / "base.gguf"))  # raises nothing


def test_a_gguf_without_a_tokenizer_says_so(tmp_path):
    """Was "tokenizer model '' (tokenizer.ggml.model) is not supported; supported: ..."."""
    import gguf

    from hearth.errors import ModelLoadError
    from hearth.loader.gguf_loader import GGUFFile
    from hearth.loader.vocab import read_vocab

    w = gguf.GGUFWriter(str(tmp_path / "bare.gguf"), "llama")
    w.add_tensor("token_embd.weight", np.zeros((8, 4), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ModelLoadError, match=r"bare.gguf: this GGUF has no tokenizer \(no tokenizer.ggml.model\)$"):
        read_vocab(GGUFFile(tmp_path / "bare.gguf"))
