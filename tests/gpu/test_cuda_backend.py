"""The CUDA backend's whole model in Triton's interpreter on the CPU, against the torch backend (its
kernels one by one: test_triton_kernels.py)."""

from __future__ import annotations

import pytest
import torch

from hearth.backends.base import Backend
from hearth.backends.cuda import TRITON_OPS, CudaBackend, TritonPart
from hearth.loader.gguf_loader import GGUFFile
from hearth.models.registry import load_model
from tests.gguf_factory import tiny_dir
from tests.gpu.test_triton_kernels import DEV
from tests.models.test_logits_vs_transformers import REL_TOL_FAST, PagedDriver, prompt, rel_err


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "gemma3"])
def test_cuda_backend_in_the_interpreter_is_held_to_the_torch_backend(tmp_path, arch):
    """The CUDA backend's whole model (Triton linears, norms, rope, KV write, attention) in Triton's
    interpreter on the CPU (tests/conftest.py sets TRITON_INTERPRET=1; on a GPU with benchmarks/gpu_check.sh),
    prefill then decode steps."""
    d, name, _ = tiny_dir(tmp_path, arch, qtype="Q8_0")
    ids = prompt(300, 12)
    logits = {}
    for backend in (Backend(), CudaBackend(DEV)):
        model, cfg = load_model(GGUFFile(d / name), backend)
        driver = PagedDriver(model, cfg, device=getattr(backend, "device", "cpu"))
        logits[backend.name] = torch.cat([driver.step({"a": ids[:9], "b": ids[:4]})["a"]]
                                         + [driver.step({"a": [t], "b": [t]})["a"] for t in ids[9:]])
    assert all(layer.ops is TRITON_OPS and isinstance(layer.attn.qkv.parts[0], TritonPart) for layer in model.layers)
    assert rel_err(logits["cuda"], logits["torch"]) < 2 * REL_TOL_FAST
