"""Prefix-cache hits on qwen35 through state snapshots at block boundaries (hearth.engine.state_snapshots): a hit
restores the recurrent layers' state saved right after its last cached block, the attention layers read the cached
K/V; greedy text equals transformers' and the engine's without prefix caching, on the tiny random model of
tests/qwen35_factory.py (exact linears)."""

from __future__ import annotations

import pytest
import torch

from hearth import LLM, SamplingParams
from hearth.kvstore.recurrent import RecurrentStates
from hearth.layers.linear import use_linear_policy
from tests.models.test_logits_vs_transformers import prompt
from tests.qwen35_factory import DIMS, hf_qwen35, write_qwen35_gguf

NEW = 10
GREEDY = SamplingParams(temperature=0, max_tokens=NEW, ignore_eos=True)
BLOCK = 8
LONG = prompt(DIMS.vocab, n=37, seed=37)  # its last full block ends at 32


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(transformers' model, path of its F32 GGUF)."""
    hf = hf_qwen35()
    return hf, write_qwen35_gguf(tmp_path_factory.mktemp("qwen35p") / "tiny-qwen35.gguf", hf)


def hf_greedy(hf, ids: list[int], n: int = NEW) -> list[int]:
    with torch.no_grad():
        out = hf.generate(torch.tensor([ids]), max_new_tokens=n, min_new_tokens=n, do_sample=False)
    return out[0, len(ids):].tolist()


def exact_llm(path, **kw) -> LLM:
    with use_linear_policy(exact=True):
        return LLM(str(path), progress=False, block_size=BLOCK, **kw)


def generate(llm, prompts, params=GREEDY) -> list[tuple[list[int], int]]:
    """(output tokens, cached prompt tokens) per prompt."""
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params)
    return [(list(o.outputs[0].token_ids), o.num_cached_tokens) for o in outs]


def test_a_shared_prefix_hits_and_equals_transformers_and_the_uncached_engine(tiny):
    hf, path = tiny
    other = LONG[:33] + prompt(DIMS.vocab, n=9, seed=9)  # shares 33 tokens: a hit of 32, restored from a's state
    llm = exact_llm(path)
    assert llm.config.enable_prefix_caching and llm.runner.snapshots.slots == 8
    (first, c0), = generate(llm, [LONG])
    (second, c1), = generate(llm, [other])
    assert (c0, c1) == (0, 32)
    assert first == hf_greedy(hf, LONG) and second == hf_greedy(hf, other)
    assert generate(exact_llm(path, enable_prefix_caching=False), [other])[0] == (second, 0)


def test_the_next_turn_hits_past_the_answer(tiny):
    """Turn 1: 19 prompt tokens + 10 answered (28 computed: the last full block at 24, inside the answer);
    turn 2 = turn 1 + answer + new text hits those 24 tokens."""
    hf, path = tiny
    llm = exact_llm(path)
    turn1 = LONG[:19]
    (answer, _), = generate(llm, [turn1])
    turn2 = turn1 + answer + prompt(DIMS.vocab, n=6, seed=6)
    (out, cached), = generate(llm, [turn2])
    assert cached == 24 and out == hf_greedy(hf, turn2)


def test_an_evicted_snapshot_means_a_recompute(tiny):
    """One snapshot: b's evicts a's, so a's prompt again has K/V blocks cached but no state to start from."""
    hf, path = tiny
    llm = exact_llm(path, state_snapshots=1)
    generate(llm, [LONG])
    generate(llm, [prompt(DIMS.vocab, n=17, seed=17)])
    assert llm.engine.scheduler.kv.snapshots.evictions >= 1
    again = LONG + [3, 4]
    (out, cached), = generate(llm, [again])
    assert cached == 0 and out == hf_greedy(hf, again)


def test_hits_with_chunked_prefill_and_preemption_equal_transformers(tiny):
    """Four prompts sharing 33 tokens, chunks of up to 12 tokens, 10 blocks of 8 for them all: the first computes
    the shared state, the others start from it; the newest are preempted and recompute (from a snapshot where
    one is held)."""
    hf, path = tiny
    prompts = [LONG[:33] + prompt(DIMS.vocab, n=2 + 3 * i, seed=100 + i) for i in range(4)]
    llm = exact_llm(path, num_kv_blocks=10, max_num_batched_tokens=12)
    outs = generate(llm, prompts)
    assert llm.engine.scheduler.num_preemptions > 0
    assert [c for _, c in outs][1:] == [32] * 3
    assert [o for o, _ in outs] == [hf_greedy(hf, p) for p in prompts]


def test_the_checks_fail_when_a_hit_skips_its_restore(tiny, monkeypatch):
    """The first test catches a hit that does not restore its state (the slot then holds zeros)."""
    hf, path = tiny
    llm = exact_llm(path)
    copy = RecurrentStates.copy
    monkeypatch.setattr(RecurrentStates, "copy",
                        lambda self, src, pairs: None if self is llm.runner.states else copy(self, src, pairs))
    other = LONG[:33] + prompt(DIMS.vocab, n=9, seed=9)
    generate(llm, [LONG])
    (out, cached), = generate(llm, [other])
    assert cached == 32 and out != hf_greedy(hf, other)


def test_the_planner_counts_the_snapshot_pool(tiny):
    """The runner's snapshot slots (state_snapshots of one sequence's state) come out of the KV bound, as
    `hearth plan` counts them."""
    from hearth.loader.gguf_loader import GGUFFile
    from hearth.memory.gguf_shape import shape_from_gguf
    from hearth.memory.kv_cache import engine_pool
    from hearth.memory.kv_formats import KV_FORMATS

    llm = exact_llm(tiny[1], num_kv_blocks=10, max_num_seqs=3, state_snapshots=5)
    shape = shape_from_gguf(GGUFFile(tiny[1]))
    assert llm.runner.snapshots.nbytes == 5 * shape.state_bytes
    pool = engine_pool(shape, KV_FORMATS["f16"], BLOCK, 3, 256, num_kv_blocks=10, state_snapshots=5)
    assert pool.bytes == llm.runner.kv_bytes  # the slots, the snapshots and the blocks


def test_a_prompt_of_whole_blocks_sent_again_hits(tiny):
    """A hit stops a block short of a prompt of whole blocks (its last token is computed for its logits): the
    snapshot is taken there, so an exact resend (a retry, an n > 1 sibling) hits too."""
    hf, path = tiny
    aligned = LONG[:32]
    llm = exact_llm(path)
    (first, c0), = generate(llm, [aligned])
    (again, c1), = generate(llm, [aligned])
    assert (c0, c1) == (0, 24) and first == again == hf_greedy(hf, aligned)


def test_the_next_turn_hits_though_it_rewrites_the_last_prompt_s_tail(tiny):
    """A chat template renders a turn's generation prompt (Qwen3.5's `<think>\\n\\n</think>\\n\\n`) one way and the
    same turn as history another: the next turn leaves the last prompt within its last few tokens. A snapshot
    GENERATION_TAIL tokens before the prompt's end is still a hit (there was none: every turn recomputed)."""
    hf, path = tiny
    history = LONG[:36]
    turn1 = history + prompt(DIMS.vocab, n=5, seed=5)  # 41 tokens: snapshots at 24 (16 before its end) and 40
    turn2 = history + prompt(DIMS.vocab, n=12, seed=12)  # the tail re-rendered otherwise, then more
    llm = exact_llm(path)
    generate(llm, [turn1])
    (got, cached), = generate(llm, [turn2])
    assert cached == 24 and got == hf_greedy(hf, turn2)
