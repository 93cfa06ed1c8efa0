"""Image spans through the engine's bookkeeping (no model): add_request's checks, chunks and cache hits
that never end inside a bidirectional span, ScheduledSequence.media, block hashes keyed by the digests."""

import re

import pytest

from hearth.engine.engine_core import EngineCore, InvalidPromptError
from hearth.engine.kv_cache_manager import KVCacheManager, hash_block
from hearth.engine.media_spans import chunk_tokens, hit_blocks
from hearth.engine.request import Request
from hearth.engine.scheduler import Scheduler
from hearth.media.inputs import MediaInput
from hearth.sampling_params import SamplingParams

from tests.engine.fakes import CountingRunner, LetterTokenizer
from tests.engine.test_scheduler import run_all

GREEDY = SamplingParams(max_tokens=3, temperature=0)


class SeeingRunner(CountingRunner):
    vision = object()  # the engine takes images only where the runner has an encoder


def make_engine(num_blocks=64, block_size=4, budget=16, runner=None, max_num_seqs=2):
    """max_num_seqs 2: a bidirectional span fits a step beside one other sequence's decode."""
    sched = Scheduler(KVCacheManager(num_blocks, block_size), max_num_seqs, budget)
    runner = runner or SeeingRunner()
    return EngineCore(sched, runner, LetterTokenizer(), 256, 50), sched, runner


def image(offset, length, digest=b"img", bidirectional=True):
    return MediaInput(offset, length, digest, None, bidirectional)


def chunks_of(runner, rid):
    """(start, tokens) of each step that computed rid's prompt rows, in order."""
    return [(s.start_pos, len(s.token_ids)) for so in runner.steps for s in so.seqs if s.request_id == rid]


@pytest.mark.parametrize("media,why", [
    ([image(8, 4)], "outside the prompt's 10 tokens"),
    ([image(-1, 2)], "outside the prompt"),
    ([image(2, 0)], "has 0 rows"),
    ([image(4, 3), image(2, 3)], "before media[0] ends"),
    ([image(2, 3), image(4, 3)], "before media[0] ends"),
    ([image(0, 9)], "more than a step computes beside 1 other sequences' decodes (max_num_batched_tokens 8, "
                    "max_num_seqs 2): raise max_num_batched_tokens to at least 10 or lower max_num_seqs"),
    ([image(0, 8)], "raise max_num_batched_tokens to at least 9"),  # a whole step: never beside a decode
    (["pixels"], "is a str, not a MediaInput"),
    ([MediaInput(2, 6, b"g", None, grid=(2, 2))], "has grid (2, 2) for 6 rows: give (rows, cols) with rows * cols == 6"),
    ([MediaInput(2, 6, b"g", None, grid=(0, 6))], "has grid (0, 6)"),
])
def test_bad_spans_are_refused_naming_why(media, why):
    engine, _, _ = make_engine(budget=8)
    with pytest.raises(InvalidPromptError, match=re.escape(why)):
        engine.add_request(list(range(1, 11)), GREEDY, media=media)
    assert not engine.has_unfinished()


def test_a_causal_image_may_be_longer_than_a_step_and_touching_spans_are_fine():
    engine, _, runner = make_engine(budget=8)
    engine.add_request(list(range(1, 21)), GREEDY, "a", media=[image(0, 12, bidirectional=False), image(12, 6)])
    run_all(engine)
    assert chunks_of(runner, "a")[:3] == [(0, 8), (8, 4), (12, 8)]  # the causal one cut at 8, the other whole


def test_images_need_a_runner_with_an_encoder():
    engine, _, _ = make_engine(runner=CountingRunner())
    with pytest.raises(InvalidPromptError, match="reads text only.*--mmproj"):
        engine.add_request(list(range(1, 11)), GREEDY, media=[image(2, 3, bidirectional=False)])


@pytest.mark.parametrize("budget", [6, 7, 8, 9, 10, 13])
def test_chunked_prefill_never_cuts_a_bidirectional_span(budget):
    engine, _, runner = make_engine(budget=budget)
    spans = [image(3, 5, b"x"), image(9, 5, b"y"), image(20, 2, b"z")]
    engine.add_request(list(range(1, 30)), GREEDY, "a", media=spans)
    engine.add_request([1, 2, 3], SamplingParams(max_tokens=12, temperature=0), "b")  # takes budget beside it
    outs = run_all(engine)
    assert len(outs["a"][-1].new_token_ids) and outs["a"][-1].finished
    steps = chunks_of(runner, "a")
    assert sum(n for _, n in steps) >= 29 and steps[0][0] == 0
    for start, n in steps:
        for m in spans:
            assert not (m.offset < start < m.end or m.offset < start + n < m.end), (start, n, m)
    seen = [s for so in runner.steps for s in so.seqs if s.request_id == "a" and s.media]
    for s in seen:  # a chunk's media: those with a row in it, whole
        assert s.media == [m for m in spans if m.offset < s.start_pos + len(s.token_ids) and m.end > s.start_pos]


def test_a_span_that_does_not_fit_beside_the_running_rows_waits_then_comes_whole():
    engine, sched, runner = make_engine(budget=7)
    engine.add_request(list(range(1, 11)), SamplingParams(max_tokens=6, temperature=0), "b")
    engine.step()  # b's first 7 prompt rows
    engine.add_request(list(range(1, 12)), GREEDY, "a", media=[image(0, 6)])
    engine.step()
    assert not chunks_of(runner, "a")  # b's last 3 prompt rows left 4: a waits in the queue, not cut
    engine.step()
    assert chunks_of(runner, "a") == [(0, 6)]  # beside b's decode


def test_a_cache_hit_ends_before_a_bidirectional_span_and_the_span_is_computed_whole():
    engine, sched, runner = make_engine(block_size=4, budget=16)
    prompt, spans = list(range(1, 21)), [image(14, 5)]  # rows 14..18
    engine.add_request(prompt, GREEDY, "first", media=spans)
    run_all(engine)
    engine.add_request(prompt, GREEDY, "again", media=spans)
    outs = run_all(engine)
    # blocks 0..3 are cached (16 tokens), but a hit at 16 would end inside 14..18: 12 tokens
    assert outs["again"][0].num_cached_tokens == 12 and chunks_of(runner, "again")[0] == (12, 8)
    assert sched.kv.stats.hits == 12


def test_a_cache_hit_past_a_span_keeps_all_its_blocks():
    engine, sched, runner = make_engine(block_size=4, budget=16)
    prompt, spans = list(range(1, 21)), [image(4, 4, b"a"), image(8, 2, b"b", bidirectional=False)]
    for rid in ("first", "again"):
        engine.add_request(prompt, GREEDY, rid, media=spans)
        outs = run_all(engine)
    assert outs["again"][0].num_cached_tokens == 16


def test_hit_blocks_rounds_down_through_earlier_spans():
    spans = [image(2, 5, b"a"), image(7, 6, b"b")]  # 2..6, 7..12
    assert hit_blocks(spans, 3, 4) == 0  # 12 inside b -> 7 -> block 1 (4) inside a -> 2 -> block 0
    assert hit_blocks(spans, 4, 4) == 4  # 16: past both
    assert hit_blocks([image(2, 5, bidirectional=False)], 1, 4) == 1  # a causal span may be cut
    assert chunk_tokens(spans, 0, 10) == 7 and chunk_tokens(spans, 7, 3) == 0 and chunk_tokens(spans, 7, 6) == 6


def test_preemption_recomputes_a_request_with_images():
    def tokens(num_blocks):
        engine, sched, runner = make_engine(num_blocks=num_blocks, block_size=2, budget=8, max_num_seqs=3)
        for i in range(3):
            engine.add_request([1 + i] * 9, SamplingParams(max_tokens=8, temperature=0), str(i),
                               media=[image(2, 5, bytes([i]))])
        outs = run_all(engine)
        assert sched.kv.pool.num_free == num_blocks
        for start, n in chunks_of(runner, "0") + chunks_of(runner, "1"):
            assert not (2 < start < 7 or 2 < start + n < 7)
        return {k: sum((o.new_token_ids for o in v), []) for k, v in outs.items()}, sched.num_preemptions

    small, preempted = tokens(num_blocks=9)
    assert preempted and small == tokens(num_blocks=64)[0]


def request(media):
    return Request("r", list(range(1, 13)), GREEDY, frozenset(), 100, media)


def test_block_hashes_take_the_digests_of_the_media_in_each_block():
    kv = KVCacheManager(16, 4)
    text = kv.block_hashes(request(()), 3)
    root = kv.cache_key
    assert text[0] == hash_block(root, [1, 2, 3, 4])  # a text block's hash is what it was
    one = kv.block_hashes(request([image(5, 2, b"one")]), 3)
    same = kv.block_hashes(request([image(5, 2, b"one")]), 3)
    other = kv.block_hashes(request([image(5, 2, b"two")]), 3)
    moved = kv.block_hashes(request([image(4, 2, b"one")]), 3)
    causal = kv.block_hashes(request([image(5, 2, b"one", bidirectional=False)]), 3)
    grid = kv.block_hashes(request([MediaInput(5, 2, b"one", None, True, grid=(1, 2))]), 3)  # M-RoPE's positions
    assert one == same
    assert one[0] == other[0] == text[0] == grid[0]  # the block before the image is shared
    for h in (other, moved, causal, text, grid):  # the image's block and every one after it differ
        assert h[1] != one[1] and h[2] != one[2]


def test_the_async_engine_carries_media_and_refuses_bad_spans_before_any_output():
    import asyncio

    from hearth.engine.async_engine import AsyncEngine

    engine, sched, runner = make_engine(budget=8)
    ae = AsyncEngine(engine)
    ae.start()

    async def main():
        with pytest.raises(InvalidPromptError, match="outside the prompt"):
            ae.add_request([1, 2, 3], GREEDY, media=[image(2, 5)])
        async with ae.add_request(list(range(1, 11)), GREEDY, "a", media=[image(3, 6)]) as stream:
            return [o async for o in stream]

    try:
        outs = asyncio.run(main())
    finally:
        ae.shutdown()
    assert outs[-1].finished
    assert [s.media for so in runner.steps for s in so.seqs if s.request_id == "a"][:2] == [[], [image(3, 6)]]


def test_a_waiting_span_is_admitted_before_later_arrivals_under_steady_traffic():
    """The head of the queue whose span does not fit the budget left stops admission (vLLM's FCFS
    break): admitting later arrivals in its place kept the budget taken by their prefills, step after
    step (the review's probe: 0 rows after 2000 steps)."""
    engine, sched, runner = make_engine(num_blocks=1024, budget=16, max_num_seqs=4)
    prefix = list(range(1, 9))  # two full blocks, cached: the span starts where the hit ends
    engine.add_request(prefix + [9], SamplingParams(max_tokens=1, temperature=0), "warm")
    run_all(engine)
    engine.add_request([40] * 40, SamplingParams(max_tokens=200, temperature=0, ignore_eos=True), "long")
    engine.step()  # long prefills 40 rows, 16 a step
    engine.add_request(prefix + [0] * 13 + [12, 13], GREEDY, "img", media=[image(8, 13)])  # 16 - 3 rows
    for step in range(30):  # a new 30-token prompt every step, each ending after one token
        engine.add_request([10 + step % 7] * 30, SamplingParams(max_tokens=1, temperature=0), f"t{step}")
        engine.step()
        if not any(r.request_id == "img" for r in list(sched.waiting) + sched.running):
            break
    assert step <= 4  # waits only for long's prefill (was: 17 steps)
    img_step = next(i for i, so in enumerate(runner.steps) if any(s.request_id == "img" for s in so.seqs))
    later = {s.request_id for so in runner.steps[:img_step + 1] for s in so.seqs if s.request_id.startswith("t")}
    assert not later  # no later arrival computed a row before img's span


def test_a_running_span_goes_beside_every_other_decode():
    """check_media leaves a bidirectional span room beside max_num_seqs - 1 decodes: a running request
    whose span comes next never waits for the others to end."""
    engine, sched, runner = make_engine(num_blocks=1024, budget=16, max_num_seqs=4)
    for i in range(3):
        engine.add_request([20 + i] * 3, SamplingParams(max_tokens=100, temperature=0, ignore_eos=True), f"d{i}")
    engine.step()
    engine.add_request([1, 2] + [0] * 13 + [3], GREEDY, "img", media=[image(2, 13)])
    for _ in range(3):
        engine.step()
    assert chunks_of(runner, "img")[:2] == [(0, 2), (2, 13)]  # the span the step after its text
    span_step = next(so for so in runner.steps if any(s.request_id == "img" and s.start_pos == 2 for s in so.seqs))
    assert sorted((s.request_id, len(s.token_ids)) for s in span_step.seqs) == [
        ("d0", 1), ("d1", 1), ("d2", 1), ("img", 13)]  # beside every decode, none of them ended


def test_each_step_carries_the_m_rope_delta_of_the_images_before_its_chunk():
    """ScheduledSequence.rope_delta: hearth.media.mrope.delta_before at the chunk's start, whatever the chunking
    (a decode's too); a request without grids has 0."""
    engine, sched, runner = make_engine(budget=5, max_num_seqs=1)
    media = [MediaInput(1, 6, b"a", None, grid=(2, 3)), MediaInput(9, 4, b"b", None, grid=(4, 1))]  # -3, then -0
    engine.add_request(list(range(1, 15)), SamplingParams(max_tokens=3, temperature=0), "g", media=media)
    engine.add_request(list(range(1, 15)), SamplingParams(max_tokens=3, temperature=0), "t", media=[image(1, 6, bidirectional=False)])
    run_all(engine)
    steps = [(s.request_id, s.start_pos, s.rope_delta) for so in runner.steps for s in so.seqs]
    assert [(p, d) for r, p, d in steps if r == "g"] == [(0, 0), (5, 0), (10, -3), (14, -3), (15, -3)]
    assert all(d == 0 for r, _, d in steps if r == "t")
