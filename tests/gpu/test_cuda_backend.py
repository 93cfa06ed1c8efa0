"""The CUDA backend's whole model in Triton's interpreter on the CPU, against the torch backend (its
kernels one by one: test_triton_kernels.py)."""

from __future__ import annotations

import pytest
import torch

from hearth.backends.base import Backend
from hearth.backends.cuda import TRITON_OPS, CudaBackend, TritonPart
from hearth.kvstore.codecs import get_codec
from hearth.kvstore.paged import QuantizedKVCache, StagingTable
from hearth.loader.gguf_loader import GGUFFile
from hearth.models.registry import load_model
from tests.gguf_factory import tiny_dir
from tests.gpu.test_triton_kernels import DEV
from tests.models.test_logits_vs_transformers import REL_TOL_FAST, PagedDriver, prompt, rel_err


# What each row brings to the backend's wiring: qwen2 q/k/v biases, halves rope, head_dim 16; qwen3 q/k norms
# in the rope kernel; gemma3 five sliding layers and a global one, sandwich norms, GELU, the embedding scale, one
# KV head; granite llama's layout (pairs rope, an untied head) and its four scales; smollm3 a NoPE layer (4
# layers: layer 3 unroped, as in its 8-layer default; each layer here costs seconds in the interpreter). llama
# had a row until 2026-12-07: its features are granite's, and its whole model runs in the engine tests below.
ARCHS = {"qwen2": {}, "qwen3": {}, "gemma3": {}, "granite": {}, "smollm3": {"layers": 4}}


@pytest.mark.parametrize("arch", list(ARCHS))
def test_cuda_backend_in_the_interpreter_is_held_to_the_torch_backend(tmp_path, arch):
    """The CUDA backend's whole model (Triton linears, norms, rope, KV write, attention) in Triton's
    interpreter on the CPU (tests/conftest.py sets TRITON_INTERPRET=1; on a GPU with benchmarks/gpu_check.sh),
    prefill then decode steps."""
    d, name, _ = tiny_dir(tmp_path, arch, qtype="Q8_0", **ARCHS[arch])
    # prefills of 9 and 4 tokens on 4-token blocks, then two decode steps: a's into the block its prefill left
    # open, b's into a new block, the second step over the first's K/V (a third step, until 2026-12-07, added none)
    ids = prompt(300, 11)
    logits = {}
    for backend in (Backend(), CudaBackend(DEV)):
        model, cfg = load_model(GGUFFile(d / name), backend)
        driver = PagedDriver(model, cfg, device=getattr(backend, "device", "cpu"))
        logits[backend.name] = torch.cat([driver.step({"a": ids[:9], "b": ids[:4]})["a"]]
                                         + [driver.step({"a": [t], "b": [t]})["a"] for t in ids[9:]])
    assert all(layer.ops is TRITON_OPS and isinstance(layer.attn.qkv.parts[0], TritonPart) for layer in model.layers)
    assert rel_err(logits["cuda"], logits["torch"]) < 2 * REL_TOL_FAST


def test_lfm2_on_the_cuda_backend_is_held_to_the_torch_backend(tmp_path):
    """lfm2's short-conv layers (torch's conv over the device cache, Triton norms) beside Triton attention layers:
    a prefill of 9 and 4 tokens, then decode steps, each reading the conv's inputs back from the device's slots."""
    from hearth.config import layer_caches
    from tests.lfm2_factory import hf_lfm2, write_lfm2_gguf

    path = write_lfm2_gguf(tmp_path / "tiny-lfm2.gguf", hf_lfm2(), qtype="Q8_0")
    ids, logits = prompt(300, 11), {}
    for backend in (Backend(), CudaBackend(DEV)):
        model, cfg = load_model(GGUFFile(path), backend)
        driver = PagedDriver(model, cfg, device=getattr(backend, "device", "cpu"))
        driver.kv = [torch.zeros(c.shape(64, 4), device=driver.kv[0].device) for c in layer_caches(cfg)]
        logits[backend.name] = torch.cat([driver.step({"a": ids[:9], "b": ids[:4]})["a"]]
                                         + [driver.step({"a": [t], "b": [t]})["a"] for t in ids[9:]])
    assert {type(layer.ops).__name__ for layer in model.layers} == {"TritonLayerOps", "TritonConvOps"}
    # measured 0.042, nearly all the torch backend's bf16 activations (the interpreter's: 2e-6 from exact f32
    # linears): the conv's B * x * C amplifies them (6 conv layers: 0.03-0.05 from exact, 6 attention: 0.011-0.016)
    assert rel_err(logits["cuda"], logits["torch"]) < 3 * REL_TOL_FAST


def test_olmo2_is_refused_with_the_reason(tmp_path):
    """The Triton ops implement neither of olmo2's norms, and torch's ops read host tables: a clear refusal."""
    from hearth.errors import UnsupportedError

    d, name, _ = tiny_dir(tmp_path, "olmo2", qtype="Q8_0")
    with pytest.raises(UnsupportedError, match="ArchSpec.pre_norm=False"):
        load_model(GGUFFile(d / name), CudaBackend(DEV))


def test_mistral3s_temperature_is_refused_with_the_reason(tmp_path):
    """Ministral 3's query temperature is not in the Triton ops (torch's ops read host tables): a clear refusal."""
    from hearth.errors import UnsupportedError

    d, name, _ = tiny_dir(tmp_path, "mistral3", qtype="Q8_0")
    with pytest.raises(UnsupportedError, match="ArchSpec.attn_temperature=True"):
        load_model(GGUFFile(d / name), CudaBackend(DEV))



def test_gpt_oss_on_the_cuda_backend_is_held_to_the_torch_backend(tmp_path):
    """gpt-oss's sinks on the CUDA backend: its attention on the torch reference (the Triton kernels have no
    sinks), the rest on Triton; in the interpreter that reference runs on the CPU's paths."""
    from tests.gguf_gpt_oss import tiny_gpt_oss_file

    path, d = tiny_gpt_oss_file(tmp_path)
    ids = prompt(d.vocab, 12)
    logits = {}
    for backend in (Backend(), CudaBackend(DEV)):
        model, cfg = load_model(GGUFFile(path), backend)
        driver = PagedDriver(model, cfg, device=getattr(backend, "device", "cpu"))
        logits[backend.name] = torch.cat([driver.step({"a": ids[:9], "b": ids[:4]})["a"]]
                                         + [driver.step({"a": [t], "b": [t]})["a"] for t in ids[9:]])
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


@pytest.mark.parametrize("args, message", [({"kv_cache_dtype": "kvarn_k4v2"}, "no Triton kernels for the KV format kvarn_k4v2 yet"),
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


class QuantizedDriver(PagedDriver):
    """PagedDriver over a quantized KV cache: a QuantizedKVCache per layer on the backend's device
    (its kv_zeros), a StagingTable's plan on each step's metadata (what the runner does)."""

    def __init__(self, model, cfg, codec_name: str, block_size: int = 4, num_blocks: int = 64):
        super().__init__(model, cfg, block_size, num_blocks)
        codec = get_codec(codec_name)
        self.staging = StagingTable(block_size, 2, codec.sink)
        self.kv = [QuantizedKVCache(codec, num_blocks, block_size, cfg.num_kv_heads, cfg.head_dim, 2,
                                    model.backend.kv_zeros) for _ in range(cfg.num_layers)]

    def step(self, batch: dict[str, list[int]]) -> dict[str, torch.Tensor]:
        metadata, qsl, seqs = self.model.backend.metadata, [0], []
        for seq, new in batch.items():
            seqs.append((seq, self.lens.get(seq, 0), len(new)))
            qsl.append(qsl[-1] + len(new))

        def with_plan(*args, **kw):  # the tables are complete when the metadata is built
            meta = metadata(*args, **kw)
            meta.kv_plan = self.staging.plan([(s, p, n, self.tables[s]) for s, p, n in seqs], qsl)
            return meta

        self.model.backend.metadata = with_plan
        try:
            return super().step(batch)
        finally:
            del self.model.backend.metadata


# steps: decode steps after the prefill. qwen3's 3 on 4-token blocks end at position 11, sealing a's third
# block; gemma3's 16-token blocks seal none in 3 (positions 20-22): one step reads the prefill's two encoded
# blocks through the window as the next two would (3 until 2026-12-07, ~1/4 of the row's interpreter time).
@pytest.mark.parametrize("arch, kv, bs, n, steps", [("qwen3", "fp8_e4m3", 4, 9, 3), ("gemma3", "q8_0", 16, 20, 1),
                                                    ("qwen3", "q4_0", 4, 9, 3)])
def test_a_quantized_kv_cache_on_the_cuda_backend_is_held_to_the_torch_backend(tmp_path, arch, kv, bs, n, steps):
    """The whole model over an fp8/q8_0/q4_0 cache (head_dim 32): its blocks encoded and read on the device
    by the Triton kernels, against the torch backend over the same format: a prefill of n tokens across
    blocks (20 on 16-token blocks: the flash tiles, gemma3's window), then decodes (on 4-token blocks, ones
    that seal a block)."""
    d, name, _ = tiny_dir(tmp_path, arch, qtype="Q8_0")
    ids = prompt(300, n + steps)
    logits = {}
    for backend in (Backend(), CudaBackend(DEV)):
        model, cfg = load_model(GGUFFile(d / name), backend)
        driver = QuantizedDriver(model, cfg, kv, block_size=bs)
        logits[backend.name] = torch.cat([driver.step({"a": ids[:n], "b": ids[:4]})["a"]]
                                         + [driver.step({"a": [t], "b": [t]})["a"] for t in ids[n:]])
    assert all(c.device.type == torch.device(DEV).type for c in driver.kv)
    assert rel_err(logits["cuda"], logits["torch"]) < 2 * REL_TOL_FAST


def _llm(path, device: str, **kw):
    import hearth.llm
    from hearth import LLM

    if device == "cuda":
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(hearth.llm, "select_backend", lambda device: CudaBackend(DEV))
            return LLM(str(path), device="cuda", progress=False, **kw)
    return LLM(str(path), device=device, progress=False, **kw)


# one format: the runner's way (staging, sealing) is every QuantCodec's, and each format's Triton kernels are
# held to the torch backend's above; fp8_e4m3 ran here too until 2026-12-06 (~10 CPU-s in the interpreter).
# q4_0: a tie in the torch backend's bf16 logits here
@pytest.mark.parametrize("kv", ["q8_0"])
def test_an_engine_with_a_quantized_kv_cache_on_the_cuda_backend_generates_as_the_torch_backend(tmp_path, kv):
    """The engine over a quantized cache on the CUDA backend (runner, staging, sealing on 4-token blocks):
    the same greedy tokens as the torch backend over the same format (tiny qwen3: its top two logprobs
    over these prompts on the torch backend >= 0.37 apart, the backends' logprobs ~1e-2)."""
    from hearth import SamplingParams
    from hearth.kvstore.paged import QuantizedKVCache
    from tests.gguf_factory import write_tiny_gguf

    path = tmp_path / "tiny-qwen3.gguf"
    write_tiny_gguf(path, "qwen3", qtype="Q8_0")  # head_dim 32: q8_0's blocks
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    prompts = [{"prompt_token_ids": [5, 17, 42, 99, 7]}, {"prompt_token_ids": [3, 1, 4, 1, 5, 9, 2, 6]}]
    args = dict(kv_cache_dtype=kv, block_size=4)
    want = [o.outputs[0].token_ids for o in _llm(path, "torch", **args).generate(prompts, params)]
    llm = _llm(path, "cuda", **args)
    assert llm.runner.backend.name == "cuda" and isinstance(llm.runner.kv_caches[0], QuantizedKVCache)
    assert [o.outputs[0].token_ids for o in llm.generate(prompts, params)] == want


def test_speculation_over_a_quantized_kv_cache_on_the_cuda_backend_is_lossless(tmp_path):
    """Chains verified over a q8_0 cache (drafts stop before a block's last slot, KVCacheManager.max_drafts):
    row_regimes stays (GEMV_MAX_ROWS,), drafts are accepted, and the greedy tokens are the torch
    backend's over the same format without speculation."""
    from hearth import SamplingParams
    from hearth.kernels.gpu.gguf_matmul import GEMV_MAX_ROWS
    from tests.gguf_factory import write_tiny_gguf

    path = tmp_path / "tiny-qwen3.gguf"
    write_tiny_gguf(path, "qwen3", qtype="Q8_0")  # head_dim 32: q8_0's blocks
    params = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
    prompt = {"prompt_token_ids": [5, 17, 42, 99, 7, 5, 17]}
    args = dict(kv_cache_dtype="q8_0", block_size=8)
    want = _llm(path, "torch", **args).generate(prompt, params)[0].outputs[0].token_ids
    spec = {"method": "draft", "model": str(path), "num_speculative_tokens": 3, "tree_budget": 5, "cost_aware": False}
    llm = _llm(path, "cuda", speculative_config=spec, **args)
    assert llm.runner.row_regimes == (GEMV_MAX_ROWS,)
    assert llm.generate(prompt, params)[0].outputs[0].token_ids == want
    stats = llm.engine.spec.stats
    assert stats.num_draft_tokens > 0 and stats.num_accepted_tokens >= 0.9 * stats.num_draft_tokens
