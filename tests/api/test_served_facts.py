"""What Ollama's routes say of a model's file (hearth.api.served.gguf_facts)."""

import pytest

from hearth.api.served import gguf_facts
from hearth.loader.file_type import _file_type
from hearth.loader.gguf_loader import GGUFFile


@pytest.mark.parametrize("value,name", [(15, "Q4_K_M"), (3, "Q4_1"), (0, "F32"), (1, "F16"), (32, "BF16"),
                                        (38, "MXFP4_MOE"), (None, ""), (1024, ""), (9999, ""), ("x", "")])
def test_the_file_type_is_named_as_llama_cpp_and_ollama_name_it(value, name):
    assert _file_type(value) == name


def test_quantization_is_the_files_type_not_its_commonest_matrix_type(tmp_path):
    """A Q4_K_M file's matrices are Q4_K, Q6_K and Q5_0 or Q8_0: Ollama's quantization_level read Q5_0."""
    import gguf
    import numpy as np

    for file_type, expected in ((15, "Q4_K_M"), (None, "F32")):
        path = tmp_path / f"{file_type}.gguf"
        w = gguf.GGUFWriter(str(path), "llama")
        if file_type is not None:
            w.add_file_type(file_type)
        w.add_tensor("blk.0.ffn_up.weight", np.zeros((4, 32), np.float32))
        w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file()
        w.close()
        assert gguf_facts(GGUFFile(path))["quantization"] == expected
