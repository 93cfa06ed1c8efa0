"""The cluster front end's ServedModel, read from the GGUF without weights: Ollama's /api/tags and
/api/show details (family, parameter size, quantization, model_info) were empty through
`hearth cluster serve`, which `hearth serve` fills."""

from __future__ import annotations

from types import SimpleNamespace

from hearth.api.served import gguf_facts
from hearth.cluster.front import served_model
from hearth.loader.gguf_loader import GGUFFile
from tests.gguf_factory import write_tiny_gguf


def test_the_fronts_model_has_the_ggufs_details(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, "llama")
    engine = SimpleNamespace(max_model_len=64, vocab_size=256, model_context=64, max_logprobs=20)
    served = served_model(str(path), ["tiny"], engine)
    facts = gguf_facts(GGUFFile(path))
    assert served.metadata["general.architecture"] == "llama" and served.metadata == facts["metadata"]
    assert (served.parameter_count, served.quantization) == (facts["parameter_count"], "F32")
    assert served.file_size == path.stat().st_size
