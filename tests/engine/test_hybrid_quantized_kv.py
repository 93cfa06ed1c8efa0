"""The engine over a quantized KV cache on models whose layers differ (tests/hybrid_models.py; exact f32 linears):
on gemma4 (KV-shared layers reading their source's encoded blocks, head dims 32 and 64) a prefix-cache hit, a
preemption and a restart served from the disk tier each give the uninterrupted run's greedy text; on qwen35 a hit
starts from a state snapshot beside the cached K/V blocks; speculation stays lossless or off. fp8_e4m3 (16-token
blocks) and kvarn_k4v2 (64-token tiles, its first block's f16 copy carried in the disk payload).
Before 2026-12-07 each of these was refused when the cache was sized ("not yet for a model with ...")."""

from __future__ import annotations

import pytest

from hearth import LLM, SamplingParams
from hearth.kernels import native
from hearth.layers.linear import use_linear_policy
from tests.hybrid_models import write
from tests.models.test_logits_vs_transformers import prompt

VOCAB = 320
BLOCK = {"fp8_e4m3": 16, "q8_0": 16, "kvarn_k4v2": 64}
"""Block size each format runs with here (KVarN: its smaller tile, so the tiny models' prompts span several)."""
CODECS = ["fp8_e4m3", "kvarn_k4v2"]
GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True, logprobs=1)
LOGPROB_TOL = 1e-3  # exact f32 linears: a cache hit or a recompute changes only the matmuls' row blocking


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hybrid")
    return lambda name: write(name, folder)


def exact_llm(path, kv: str, **kw) -> LLM:
    with use_linear_policy(exact=True):
        return LLM(str(path), progress=False, kv_cache_dtype=kv, block_size=BLOCK[kv], **kw)


def run(llm: LLM, prompts: list[list[int]], params=GREEDY) -> list:
    return list(llm.generate([{"prompt_token_ids": p} for p in prompts], params))


def assert_same(got, want) -> None:
    assert list(got.token_ids) == list(want.token_ids)
    for a, b, t in zip(got.logprobs, want.logprobs, want.token_ids):
        assert abs(a[t] - b[t]) < LOGPROB_TOL


def whole_blocks(n: int, block: int) -> int:
    """Prompt tokens a hit can cover: the last block before the prompt's last token."""
    return (n - 1) // block * block


@pytest.mark.parametrize("kv", CODECS)
def test_gemma4_prefix_cache_hit_equals_miss(files, kv):
    llm = exact_llm(files("gemma4-e2b"), kv)
    ids = prompt(VOCAB, n=150, seed=2)
    miss, = run(llm, [ids])
    hit, = run(llm, [ids])
    assert miss.num_cached_tokens == 0 and hit.num_cached_tokens == whole_blocks(150, llm.config.block_size)
    assert_same(hit.outputs[0], miss.outputs[0])


@pytest.mark.parametrize("kv", CODECS)
def test_gemma4_preempted_and_recomputed_equals_uninterrupted(files, kv):
    path = files("gemma4-e2b")
    prompts = [prompt(VOCAB, n=60, seed=s) for s in range(4)]
    plain = exact_llm(path, kv, enable_prefix_caching=False)
    alone = [run(plain, [p])[0].outputs[0] for p in prompts]
    # prompts of 4 blocks (fp8) or 1 (kvarn) grow to 6 or 2 while decoding: two or three admitted run out of
    # blocks and the newest is preempted
    small = exact_llm(path, kv, num_kv_blocks=2 * -(-60 // BLOCK[kv]) + 1, enable_prefix_caching=False)
    for got, want in zip(run(small, prompts), alone):
        assert_same(got.outputs[0], want)
    assert small.engine.scheduler.num_preemptions > 0


@pytest.mark.parametrize("kv", CODECS)
def test_gemma4_restart_serves_the_prompt_from_disk(files, kv, tmp_path):
    """The disk tier's payloads hold each layer at its own shape (none for the KV-shared ones): after a restart the
    prompt's whole blocks load from disk, and the text is the cold run's."""
    path, ids = files("gemma4-e2b"), prompt(VOCAB, n=150, seed=3)
    first = exact_llm(path, kv, kv_disk_dir=str(tmp_path))
    cold, = run(first, [ids])
    first.close()
    again = exact_llm(path, kv, kv_disk_dir=str(tmp_path))
    restored, = run(again, [ids])
    again.close()
    n = whole_blocks(150, again.config.block_size)
    assert restored.num_cached_tokens == n and again.engine.scheduler.kv.stats.disk_hits == n
    assert_same(restored.outputs[0], cold.outputs[0])


@pytest.mark.parametrize("name", ["gemma4-e2b-q8", "gemma4-512-q8"])
def test_gemma4_speculation_is_lossless_or_off(files, name, monkeypatch):
    """n-gram drafts over a quantized cache: verify rows computed as decode rows (the native kernel takes every
    head dim, 512 too) so greedy text is the plain engine's; where they are not, hearth keeps speculation off and
    says why. Q8_0 files: the native layers (exact f32 linears are torch's, where speculation is off)."""
    path = files(name)
    spec = {"method": "ngram", "num_speculative_tokens": 4, "cost_aware": False, "prompt_lookup_min": 1}
    params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    prompts = [prompt(VOCAB, n=8, seed=s) for s in (5, 6)]
    llm = LLM(str(path), progress=False, kv_cache_dtype="q8_0", speculative_config=spec)
    if llm.speculation_off:  # the torch tier
        pytest.skip(llm.speculation_off)
    plain = LLM(str(path), progress=False, kv_cache_dtype="q8_0")
    want = [list(o.outputs[0].token_ids) for o in run(plain, prompts, params)]
    taken = []  # whether the native kernel took each call (False: torch attended, a verify row is no decode row)
    kernel = native.quantized_paged_attention
    monkeypatch.setattr(native, "quantized_paged_attention", lambda *a: taken.append(kernel(*a)) or taken[-1])
    assert [list(o.outputs[0].token_ids) for o in run(llm, prompts, params)] == want
    assert taken and all(taken)
    assert llm.engine.spec.stats.num_draft_tokens > 0


@pytest.mark.parametrize("kv", ["q8_0", "kvarn_k4v2"])
def test_qwen35_hits_from_a_state_snapshot(files, kv):
    """Another prompt sharing the first's whole blocks hits them: its recurrent layers start from the snapshot taken
    after the last one, its attention layers read the encoded blocks; the text is the uncached engine's."""
    path = files("qwen35")
    llm = exact_llm(path, kv)
    bs = llm.config.block_size
    first = prompt(VOCAB, n=2 * bs + 5, seed=7)
    other = first[:2 * bs + 1] + prompt(VOCAB, n=9, seed=9)
    a, = run(llm, [first])
    b, = run(llm, [other])
    assert (a.num_cached_tokens, b.num_cached_tokens) == (0, 2 * bs)
    assert llm.engine.scheduler.kv.snapshots.capacity > 0
    uncached, = run(exact_llm(path, kv, enable_prefix_caching=False), [other])
    assert_same(b.outputs[0], uncached.outputs[0])
