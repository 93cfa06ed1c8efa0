"""general.architecture picks the model class; anything else is a one-line UnsupportedError."""

import pytest

from hearth.errors import UnsupportedError
from hearth.loader.gguf_loader import GGUFFile
from hearth.backends import select
from hearth.models.registry import ARCHITECTURES, load_model
from tests.gguf_factory import LAYOUTS, write_header_only_gguf, write_tiny_gguf


@pytest.mark.parametrize("arch", sorted(LAYOUTS))
def test_each_architecture_loads_its_own_class(tmp_path, arch):
    path = tmp_path / f"{arch}.gguf"
    dims = write_tiny_gguf(path, arch)
    model, cfg = load_model(GGUFFile(path), select())
    file_arch = LAYOUTS[arch].file_arch or arch  # olmo3: an olmo2 file
    assert type(model).__name__ == ARCHITECTURES[file_arch].split(":")[1]
    assert (cfg.arch, cfg.num_layers, cfg.head_dim, cfg.vocab_size) == (file_arch, dims.layers, dims.head_dim, dims.vocab)


def test_unsupported_architecture_names_the_supported_ones(tmp_path):
    path = tmp_path / "mamba.gguf"  # an architecture hearth has no implementation for
    write_header_only_gguf(path, "mamba")
    with pytest.raises(UnsupportedError) as e:
        load_model(GGUFFile(path), select())
    message = str(e.value)
    assert "'mamba'" in message and "\n" not in message
    assert all(arch in message for arch in ("gemma2", "gemma3", "gpt-oss", "llama", "phi3", "qwen2", "qwen3"))
