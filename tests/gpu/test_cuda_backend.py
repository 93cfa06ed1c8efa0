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


def test_an_engine_on_the_cuda_backend_generates_as_the_torch_backend(tmp_path, monkeypatch):
    """The whole engine (runner, KV pages from the backend, metadata, sampling on the host) over the
    CUDA backend: the same greedy tokens as on the torch backend (tiny llama, margins of this seed)."""
    import hearth.llm
    from hearth import LLM, SamplingParams
    from tests.gguf_factory import write_tiny_gguf

    path = tmp_path / "tiny-llama.gguf"
    write_tiny_gguf(path, "llama", qtype="Q8_0")
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    prompts = [{"prompt_token_ids": [5, 17, 42, 99, 7]}, {"prompt_token_ids": [3, 1, 4, 1, 5, 9, 2, 6]}]
    want = [o.outputs[0].token_ids for o in LLM(str(path), device="torch", progress=False).generate(prompts, params)]
    monkeypatch.setattr(hearth.llm, "select_backend", lambda device: CudaBackend(DEV))
    llm = LLM(str(path), device="cuda", progress=False)
    assert llm.runner.backend.name == "cuda"
    assert [o.outputs[0].token_ids for o in llm.generate(prompts, params)] == want


@pytest.mark.parametrize("args, message", [({"kv_cache_dtype": "q8_0"}, "no quantized KV formats yet"),
                                           ({"kv_disk_dir": "kv"}, "no KV disk tier yet")])
def test_what_the_cuda_backend_lacks_fails_before_the_load(tmp_path, monkeypatch, args, message):
    import hearth.llm
    from hearth import LLM
    from hearth.errors import HearthError

    monkeypatch.setattr(hearth.llm, "select_backend", lambda device: CudaBackend(DEV))
    with pytest.raises(HearthError, match=message):
        LLM(str(tmp_path / "missing.gguf"), device="cuda", progress=False, **args)


@pytest.mark.parametrize("tree_budget", [0, 5], ids=["chain", "tree"])
def test_speculation_on_the_cuda_backend_is_lossless(tmp_path, monkeypatch, tree_budget):
    """The tiny model drafting for itself on the CUDA backend (interpreted): chains and token trees
    are verified in steps under gm.GEMV_MAX_ROWS rows (row_regimes), the drafts accepted, and the
    greedy tokens those of the torch backend without speculation."""
    import hearth.llm
    from hearth import LLM, SamplingParams
    from hearth.kernels.gpu.gguf_matmul import GEMV_MAX_ROWS
    from tests.gguf_factory import write_tiny_gguf

    path = tmp_path / "tiny-llama.gguf"
    write_tiny_gguf(path, "llama", qtype="Q8_0")
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    prompt = {"prompt_token_ids": [5, 17, 42, 99, 7, 5, 17]}
    want = LLM(str(path), device="torch", progress=False).generate(prompt, params)[0].outputs[0].token_ids
    monkeypatch.setattr(hearth.llm, "select_backend", lambda device: CudaBackend(DEV))
    spec = {"method": "draft", "model": str(path), "num_speculative_tokens": 3, "tree_budget": tree_budget,
            "cost_aware": False}
    llm = LLM(str(path), device="cuda", progress=False, speculative_config=spec)
    assert llm.runner.row_regimes == (GEMV_MAX_ROWS,)
    assert llm.generate(prompt, params)[0].outputs[0].token_ids == want
    stats = llm.engine.spec.stats
    drafted, accepted = stats.num_draft_tokens, stats.num_accepted_tokens
    if tree_budget:  # the top-1 chain accepted, its side branches verified and rejected
        assert accepted >= 4 and drafted > accepted
    else:
        assert drafted > 0 and accepted >= 0.9 * drafted
