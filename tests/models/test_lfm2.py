"""lfm2 (hearth.models.lfm2, hearth.models.short_conv) against transformers' Lfm2ForCausalLM on a tiny random
model written as llama.cpp's converter writes it (tests/lfm2_factory.py): prefill logits, decode token by token
against transformers with its own cache, and the conv's state kept in the paged cache doing what K/V do there:
chunked prefill == whole, a prefix-cache hit == a miss, speculation lossless, preempted == uninterrupted, whole
blocks saved and loaded (the disk tier's payloads)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from hearth import LLM, SamplingParams
from hearth.backends import select
from hearth.config import layer_caches
from hearth.kernels import native
from hearth.layers.linear import use_linear_policy
from hearth.loader.gguf_loader import GGUFFile
from hearth.models.registry import load_model
from tests.lfm2_factory import DIMS, hf_lfm2, write_lfm2_gguf
from tests.models.test_logits_vs_transformers import REL_TOL, PagedDriver, prompt, rel_err

CHUNK_TOL = 1e-5  # chunked vs whole, exact f32 linears: only the matmuls' row blocking differs (measured 1.1e-6)
FAR = 0.05  # the conv reading no history, or the wrong slot: this far off at least (measured 1.3, 1.5)


class Driver(PagedDriver):
    """PagedDriver over each layer's LayerCache (f32): K/V, or a conv layer's input."""

    def __init__(self, model, cfg, block_size: int = 4, num_blocks: int = 64, seed: int = 0):
        super().__init__(model, cfg, block_size, num_blocks, seed)
        self.kv = [torch.zeros(c.shape(num_blocks, block_size)) for c in layer_caches(cfg)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(transformers' model, path of its F32 GGUF, hearth's exact model, cfg)."""
    hf = hf_lfm2()
    path = write_lfm2_gguf(tmp_path_factory.mktemp("lfm2") / "tiny-lfm2.gguf", hf)
    with use_linear_policy(exact=True):
        model, cfg = load_model(GGUFFile(path), select())
    return hf, path, model, cfg


def test_config_from_the_file(tiny):
    _, _, model, cfg = tiny
    assert cfg.conv_layers == (True, True, False, True, False, True) and cfg.conv_kernel == 3
    assert (cfg.num_kv_heads, cfg.head_dim) == (DIMS.kv_heads, DIMS.head_dim)
    assert [c.shape(8, 4) for c in layer_caches(cfg)[1:3]] == [(1, 8, 4, 1, DIMS.hidden), (2, 8, 4, 1, DIMS.head_dim)]


def test_prefill_logits_equal_transformers(tiny):
    hf, _, model, cfg = tiny
    ids = prompt(cfg.vocab_size)
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    assert rel_err(Driver(model, cfg).step({"a": ids})["a"], ref) < REL_TOL


def test_decode_token_by_token_equals_transformers_with_its_cache(tiny):
    """A prefill of 5, then one token a step, both sides on their caches (transformers' conv state, hearth's slots)."""
    hf, _, model, cfg = tiny
    ids = prompt(cfg.vocab_size, n=14)
    driver = Driver(model, cfg, seed=3)
    with torch.no_grad():
        out = hf(torch.tensor([ids[:5]]), use_cache=True)
        refs, ours = [out.logits[0]], [driver.step({"a": ids[:5]})["a"]]
        for t in ids[5:]:
            out = hf(torch.tensor([[t]]), past_key_values=out.past_key_values, use_cache=True)
            refs.append(out.logits[0])
            ours.append(driver.step({"a": [t]})["a"])
    assert rel_err(torch.cat(ours), torch.cat(refs)) < REL_TOL


def _chunked(model, cfg, ids, sizes) -> torch.Tensor:
    """Two sequences in one batch each step (scrambled blocks), ids in chunks of `sizes` -> seq a's logits."""
    driver, out, at = Driver(model, cfg, seed=7), [], 0
    other = prompt(cfg.vocab_size, n=len(ids), seed=9)
    for n in sizes:
        step = driver.step({"a": ids[at:at + n], "b": other[at:at + n]})
        out.append(step["a"])
        at += n
    return torch.cat(out)


def test_chunked_prefill_equals_whole(tiny):
    _, _, model, cfg = tiny
    ids = prompt(cfg.vocab_size, n=20)
    whole = _chunked(model, cfg, ids, [20])
    assert rel_err(_chunked(model, cfg, ids, [1, 6, 2, 7, 1, 3]), whole) < CHUNK_TOL


def test_the_conv_reads_its_history_from_the_slots(tiny, monkeypatch):
    """The checks above fail when the conv reads no history, or the slot one token further back."""
    from hearth.kernels.step_metadata import AttentionMetadata

    hf, _, model, cfg = tiny
    ids = prompt(cfg.vocab_size, n=12)
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    taps = AttentionMetadata.conv_taps
    breaks = {"no history": lambda meta, w: torch.where(torch.arange(w) < w - 1, -1, taps(meta, w)),
              "one slot further back": lambda meta, w: torch.cat([taps(meta, w + 1)[:, :1], taps(meta, w)[:, :-1]], 1)}
    for why, broken in breaks.items():
        monkeypatch.setattr(AttentionMetadata, "conv_taps", broken)
        assert rel_err(_chunked(model, cfg, ids, [5, 1, 6]), ref) > FAR, why


def test_whole_blocks_save_and_load(tiny):
    """BlockIO (the disk tier's and snapshots' payloads) over lfm2's caches: conv layers' blocks beside K/V's."""
    from hearth.kvstore.block_io import BlockIO, block_format
    from hearth.kvstore.codecs import CODECS

    _, _, _, cfg = tiny
    codec = CODECS["f16"]
    caches = [torch.randn(c.shape(6, 4)).half() for c in layer_caches(cfg)]
    io = BlockIO(caches, None, block_format(codec, cfg, 4))
    payloads = io.export([4, 1])
    assert all(len(p) == io.fmt.block_bytes for p in payloads)
    want = [c.clone() for c in caches]
    for c in caches:
        c.zero_()
    io.load([(4, payloads[0]), (1, payloads[1])])
    for c, w in zip(caches, want):
        assert torch.equal(c[:, [4, 1]], w[:, [4, 1]]) and not c[:, 0].any()


@pytest.fixture(scope="module")
def q8_path(tmp_path_factory):
    """A Q8_0 file whose blocks add little to the stream (tests/lfm2_factory.hf_lfm2): its greedy text repeats
    short runs, so n-gram drafts get accepted."""
    d = replace(DIMS, heads=2, head_dim=32)  # heads the native attention takes (head_dim 16: speculation off)
    return write_lfm2_gguf(tmp_path_factory.mktemp("lfm2q8") / "tiny-lfm2-q8.gguf", hf_lfm2(seed=1, d=d, blocks=0.2),
                           qtype="Q8_0", d=d)


GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True, logprobs=1)
LOGPROB_TOL = 1e-3  # exact f32 linears: a cache hit or a recompute changes only the matmuls' row blocking


def _exact_llm(path, **kw) -> LLM:
    with use_linear_policy(exact=True):
        return LLM(str(path), progress=False, **kw)


def _generate(llm, prompts, params=GREEDY) -> list:
    return [o.outputs[0] for o in llm.generate([{"prompt_token_ids": p} for p in prompts], params)]


def _assert_same(got, want) -> None:
    assert list(got.token_ids) == list(want.token_ids)
    for a, b, t in zip(got.logprobs, want.logprobs, want.token_ids):
        assert abs(a[t] - b[t]) < LOGPROB_TOL


def test_prefix_cache_hit_equals_miss(tiny):
    llm = _exact_llm(tiny[1], block_size=16)
    ids = prompt(DIMS.vocab, n=40, seed=2)
    llm.engine.scheduler.kv.pool.reset_prefix_cache()
    miss = llm.generate({"prompt_token_ids": ids}, GREEDY)[0]
    hit = llm.generate({"prompt_token_ids": ids}, GREEDY)[0]
    assert miss.num_cached_tokens == 0 and hit.num_cached_tokens >= 32
    _assert_same(hit.outputs[0], miss.outputs[0])


def test_preempted_and_recomputed_equals_uninterrupted(tiny):
    prompts = [prompt(DIMS.vocab, n=20, seed=s) for s in range(4)]
    plain = _exact_llm(tiny[1])
    alone = [_generate(plain, [p])[0] for p in prompts]
    # 6 blocks of 16 tokens cannot hold 4 sequences of 44 tokens: the newest are preempted
    small = _exact_llm(tiny[1], num_kv_blocks=6, block_size=16)
    for got, want in zip(_generate(small, prompts), alone):
        _assert_same(got, want)
    assert small.engine.scheduler.num_preemptions > 0


@pytest.mark.parametrize("tree", [{}, {"tree_budget": 8, "prompt_lookup_max": 3}], ids=["chain", "tree"])
def test_ngram_speculation_is_lossless(q8_path, tree):
    """Greedy with n-gram drafts is greedy without them, token for token, with drafts accepted (the native
    kernels: verify rows computed as decode rows): the verify rows' conv reads the drafts before them from their
    slots (a tree node: its path's), a rejected draft's B * x is overwritten, an accepted path's moved."""
    spec = {"method": "ngram", "num_speculative_tokens": 4, "cost_aware": False, "prompt_lookup_min": 1, **tree}
    params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    prompts = [prompt(DIMS.vocab, n=8, seed=s) for s in (5, 6)]
    llm = LLM(str(q8_path), progress=False, speculative_config=spec)
    if llm.speculation_off:  # the torch tier: verify rows are not decode rows, so hearth keeps speculation off
        pytest.skip(llm.speculation_off)
    want = [list(o.token_ids) for o in _generate(LLM(str(q8_path), progress=False), prompts, params)]
    assert [list(o.token_ids) for o in _generate(llm, prompts, params)] == want
    stats = llm.engine.spec.stats
    assert stats.num_draft_tokens > 0 and stats.num_accepted_tokens > 0


def test_conv_taps_follow_a_trees_paths():
    """A tree's node reads its ancestors' slots (node c sits at base + c), then the tokens before the tree."""
    from hearth.kernels.step_metadata import AttentionMetadata

    # one sequence, 5 tokens cached, this step: 1 token (position 5) then nodes 0..3, parents [-1, 0, -1, 2]
    table, bs = [3, 1, 6], 4
    slot = lambda p: table[p // bs] * bs + p % bs  # noqa: E731
    meta = AttentionMetadata([0, 5], [10], [table], torch.tensor([slot(p) for p in range(5, 10)]), bs,
                             trees={0: (1, [-1, 0, -1, 2])})
    s = [slot(p) for p in range(10)]
    assert meta.conv_taps(3).tolist() == [[s[3], s[4], s[5]], [s[4], s[5], s[6]], [s[5], s[6], s[7]],
                                          [s[4], s[5], s[8]], [s[5], s[8], s[9]]]
    chain = AttentionMetadata([0, 2], [2], [[5]], torch.tensor([20, 21]), bs)
    assert chain.conv_taps(3).tolist() == [[-1, -1, 20], [-1, 20, 21]]


def test_the_planner_counts_what_the_runner_allocates(tiny):
    """`hearth plan`'s bytes a token (conv layers: their input, 64 values; attention: K+V, 2 x 16) == the runner's."""
    from hearth.kvstore.codecs import CODECS, cache_block_bytes
    from hearth.memory.gguf_shape import shape_from_gguf
    from hearth.memory.kv_cache import token_bytes
    from hearth.memory.kv_formats import KV_FORMATS

    _, path, _, cfg = tiny
    shape = shape_from_gguf(GGUFFile(path))
    assert shape.conv_dims == (64, 64, 0, 64, 0, 64) and shape.conv_kernel == 3
    assert token_bytes(shape, KV_FORMATS["f16"], 16) * 16 == cache_block_bytes(CODECS["f16"], layer_caches(cfg), 16)
    assert token_bytes(shape, KV_FORMATS["f16"], 16) == 2 * (4 * 64 + 2 * 2 * 16)  # f16: 2 B a value


def test_lora_adapters_are_refused_by_name(q8_path, tmp_path):
    from hearth.errors import ModelLoadError
    from tests.lora_factory import write_lora_gguf

    write_lora_gguf(tmp_path / "adapter.gguf", q8_path, ["blk.2.attn_q.weight"])
    with pytest.raises(ModelLoadError, match="LoRA adapters on a model with short-convolution layers"):
        LLM(str(q8_path), progress=False, lora=[(str(tmp_path / "adapter.gguf"), 1.0)])


FAST_TOL = 0.15  # the CPU's fast paths (int8 activations) from exact f32 linears: measured 0.04-0.09 over 8 files


@pytest.mark.skipif(not native.has("fused_ops"), reason="no fused native ops at this tier")
def test_the_cpu_backends_paths_near_exact(q8_path):
    """Conv layers on NativeConvOps (norm fused into in_proj, out_proj added into the stream, the MLP in one call),
    attention layers on the fused C++ layer one by one (no whole-model stack): a prefill, then decode steps, near
    the same file's exact f32 linears."""
    ids = prompt(DIMS.vocab, n=16)
    runs = {}
    for exact in (True, False):
        with use_linear_policy(exact=exact):
            model, cfg = load_model(GGUFFile(q8_path), select())
        driver = Driver(model, cfg)
        runs[exact] = torch.cat([driver.step({"a": ids[:10]})["a"]] + [driver.step({"a": [t]})["a"] for t in ids[10:]])
    assert [type(layer.ops).__name__ for layer in model.layers] == (["NativeConvOps"] * 2 + ["NativeLayerOps"]
                                                                    + ["NativeConvOps", "NativeLayerOps", "NativeConvOps"])
    assert model.stack is None
    assert rel_err(runs[False], runs[True]) < FAST_TOL
