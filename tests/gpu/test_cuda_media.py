"""Image rows on the CUDA backend in Triton's interpreter (on a GPU with benchmarks/gpu_check.sh): the
embeds written over the token embeddings on the device, and a step with bidirectional rows attended by
the torch reference there (the Triton kernels' masks are causal), and M-RoPE's positions [3, T] read through
the device's rope tables (Qwen3-VL's deepstack parts added there too), held to the torch backend."""

from __future__ import annotations

import torch

from hearth.backends.base import Backend
from hearth.backends.cuda import CudaBackend
from hearth.loader.gguf_loader import GGUFFile
from hearth.media.inputs import MediaInput
from hearth.media.mrope import positions as mrope_positions
from hearth.models.registry import load_model
from tests.gguf_factory import tiny_dir
from tests.gpu.test_triton_kernels import DEV
from tests.models.test_logits_vs_transformers import REL_TOL_FAST, PagedDriver, prompt, rel_err


def step(driver: PagedDriver, ids: list[int], rows: torch.Tensor, spans: list[tuple[int, int]],
         positions: torch.Tensor | None = None) -> torch.Tensor:
    """One sequence's prompt in one step, rows [len(ids), hidden] written over positions 2.. (bidirectional
    spans as given; positions [n] or [3, n], default 0..n-1) -> logits [len(ids), vocab]."""
    model, n = driver.model, len(ids)
    table = [driver.free.pop() for _ in range(-(-n // driver.block_size))]
    slots = [table[p // driver.block_size] * driver.block_size + p % driver.block_size for p in range(n)]
    meta = model.backend.metadata([0, n], [n], [table], slots, driver.block_size)
    meta.bidirectional = {0: spans} if spans else {}
    with torch.no_grad():
        hidden = model(torch.tensor(ids), torch.arange(n) if positions is None else positions, meta, driver.kv,
                       embeds=(torch.arange(2, 2 + len(rows)), rows))
        return model.compute_logits(hidden).cpu()


def test_image_rows_on_the_cuda_backend_are_held_to_the_torch_backend(tmp_path):
    d, name, dims = tiny_dir(tmp_path, "gemma3", qtype="Q8_0")
    ids = prompt(300, 14)
    rows = torch.randn(7, dims.hidden, generator=torch.Generator().manual_seed(3))
    logits = {}
    for backend in (Backend(), CudaBackend(DEV)):
        model, cfg = load_model(GGUFFile(d / name), backend)
        for spans in ([], [(2, 9)]):
            driver = PagedDriver(model, cfg, device=getattr(backend, "device", "cpu"))
            logits[backend.name, bool(spans)] = step(driver, ids, rows, spans)
    for bidirectional in (False, True):
        assert rel_err(logits["cuda", bidirectional], logits["torch", bidirectional]) < 2 * REL_TOL_FAST
    assert rel_err(logits["torch", True][2:], logits["torch", False][2:]) > 0.1


def test_m_rope_positions_on_the_cuda_backend_are_held_to_the_torch_backend(tmp_path):
    d, name, dims = tiny_dir(tmp_path, "qwen2vl", qtype="Q8_0")
    ids = prompt(300, 14)
    rows = torch.randn(6, dims.hidden, generator=torch.Generator().manual_seed(4))
    thw = torch.tensor(mrope_positions(range(14), 0, [MediaInput(2, 6, b"g", None, grid=(2, 3))]))  # [3, 14]
    logits = {}
    for backend in (Backend(), CudaBackend(DEV)):
        model, cfg = load_model(GGUFFile(d / name), backend)
        for grid in (False, True):
            driver = PagedDriver(model, cfg, device=getattr(backend, "device", "cpu"))
            logits[backend.name, grid] = step(driver, ids, rows, [], thw if grid else None)
    for grid in (False, True):  # measured 3e-3 in the interpreter (the h and w sections turned as t: 1.9e-2)
        assert rel_err(logits["cuda", grid], logits["torch", grid]) < 1e-2
    assert rel_err(logits["torch", True][2:], logits["torch", False][2:]) > 0.05


def test_deepstack_rows_and_interleaved_m_rope_on_the_cuda_backend_are_held_to_the_torch_backend(tmp_path):
    """qwen3vl: rows [n, hidden * (1 + deepstack)] whose parts are added on the device between layers, at
    positions [3, T] through the interleaved tables."""
    d, name, dims = tiny_dir(tmp_path, "qwen3vl", qtype="Q8_0")
    ids = prompt(300, 14)
    rows = torch.randn(6, dims.hidden * (1 + dims.deepstack), generator=torch.Generator().manual_seed(5))
    thw = torch.tensor(mrope_positions(range(14), 0, [MediaInput(2, 6, b"g", None, grid=(2, 3))]))  # [3, 14]
    logits = {}
    for backend in (Backend(), CudaBackend(DEV)):
        model, cfg = load_model(GGUFFile(d / name), backend)
        for parts in (1, 1 + dims.deepstack):
            driver = PagedDriver(model, cfg, device=getattr(backend, "device", "cpu"))
            logits[backend.name, parts] = step(driver, ids, rows[:, :dims.hidden * parts].contiguous(), [], thw)
    for parts in (1, 1 + dims.deepstack):
        assert rel_err(logits["cuda", parts], logits["torch", parts]) < 1e-2
    assert rel_err(logits["torch", 1 + dims.deepstack][2:], logits["torch", 1][2:]) > 0.05
