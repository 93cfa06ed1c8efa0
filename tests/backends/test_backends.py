"""The backend seam: one object chosen from EngineConfig.device, the torch backend the reference the
CPU backend is held to on the same model in the same process, and bad devices named."""

from __future__ import annotations

import logging

import pytest
import torch

from hearth import LLM, SamplingParams
from hearth.backends import select
from hearth.backends.base import TORCH_OPS, Backend
from hearth.errors import UnsupportedError
from hearth.kernels import native
from hearth.loader.gguf_loader import GGUFFile
from hearth.models.registry import load_model
from tests.gguf_factory import tiny_dir, write_tiny_gguf
from tests.models.test_logits_vs_transformers import REL_TOL_FAST, PagedDriver, prompt, rel_err


def test_devices_select_one_backend_each():
    assert type(select("torch")) is Backend
    cpu = select("cpu")
    assert (type(cpu) is Backend) == (not native.available())  # at the torch tier, or without the library: torch's
    assert select("auto") is cpu and select("cpu") is cpu  # one object: models built on it share it
    with pytest.raises(UnsupportedError, match=r"device: 'tpu' is not one of auto, cpu, cuda, torch"):
        select("tpu")


def test_cpu_without_a_kernel_library_is_the_torch_backend(monkeypatch):
    """No compiler (or a failed build): the CPU runs torch's kernels, not a backend without its library."""
    from hearth import backends

    monkeypatch.setattr(native, "available", lambda: False)
    backends._backend.cache_clear()
    try:
        assert type(select("cpu")) is Backend
    finally:
        backends._backend.cache_clear()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: --device cuda runs on it")
def test_cuda_without_a_gpu_is_one_line_and_the_cpu_runs(caplog):
    with caplog.at_level(logging.WARNING, logger="hearth"):
        backend = select("cuda")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "no usable GPU" in lines[0] and "running on the CPU" in lines[0]
    assert backend is select("cpu")


@pytest.mark.parametrize("arch, dims", [
    ("llama", {}), ("qwen2", {}), ("qwen3", {}), ("gemma2", {}), ("gemma3", {}), ("phi3", {}),
    ("llama", {"llama3_rope": (8.0, 1.0, 4.0, 16)}),
    ("phi3", {"longrope_original_context": 16, "rope_dim": 12, "sliding_window": 8}),
    ("qwen2", {"context": 64, "yarn_original_context": 16, "yarn_betas": (4.0, 0.1), "rope_theta": 10000.0})],
    ids=["llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "llama3-rope", "phi3-longrope", "qwen2-yarn"])
def test_cpu_backend_is_held_to_the_torch_backend(tmp_path, arch, dims):
    """The same file on both backends: logits within the fast paths' bound of each other, and at a
    tier with C++ kernels every layer runs the backend's own ops (not torch's) with other bits."""
    d, name, tiny = tiny_dir(tmp_path, arch, qtype="Q8_0", **dims)
    ids = prompt(300)  # past the 16-token original context of the scaled ropes
    logits = {}
    for device in ("torch", "cpu"):
        model, cfg = load_model(GGUFFile(d / name), select(device))
        assert cfg.context_length == tiny.context  # each scaling computed: none kept to its original context
        assert all(layer.backend is model.backend for layer in model.layers)
        driver = PagedDriver(model, cfg)
        logits[device] = torch.cat([driver.step({"a": ids[:7]})["a"]] + [driver.step({"a": [t]})["a"] for t in ids[7:]])
        if device == "torch" or not native.available():
            assert all(layer.ops is TORCH_OPS for layer in model.layers)
    assert rel_err(logits["cpu"], logits["torch"]) < 2 * REL_TOL_FAST
    if native.available():
        assert all(layer.ops is not TORCH_OPS for layer in model.layers)  # MoE: tests/backends/test_cpu_moe_layer.py
        assert not torch.equal(logits["cpu"], logits["torch"])


def test_llm_on_the_torch_device_generates_and_says_why_speculation_is_off(tmp_path, caplog):
    path = tmp_path / "tiny-llama.gguf"
    write_tiny_gguf(path, "llama", qtype="Q8_0")
    with caplog.at_level(logging.WARNING, logger="hearth"):
        llm = LLM(str(path), device="torch", progress=False, speculative_config={"method": "ngram"})
    assert type(llm.backend) is Backend and llm.runner.backend is llm.backend
    assert any("speculative decoding is off" in r.getMessage() for r in caplog.records)
    out = llm.generate(["hello"], SamplingParams(temperature=0, max_tokens=5, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == 5


def test_an_unknown_device_fails_before_the_load(tmp_path):
    with pytest.raises(UnsupportedError, match="device: 'gpu'"):
        LLM(str(tmp_path / "missing.gguf"), device="gpu", progress=False)

