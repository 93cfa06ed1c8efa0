"""The disk tier in the engine: after a restart (a new engine on the same directory) a prompt seen
before starts from blocks loaded from disk into fresh block ids, before the step that reads them;
a corrupt file is recomputed, never used. First with a fake runner whose KV "content" is the token
ids (every read is checked), then on SmolLM2 for f16 and q8_0."""

from __future__ import annotations

import itertools
import random
import shutil
from array import array

import pytest

from hearth import LLM, SamplingParams
from hearth.engine.engine_core import EngineCore
from hearth.engine.kv_cache_manager import KVCacheManager
from hearth.engine.scheduler import Scheduler
from hearth.kvstore.block_hash import chain_hashes
from hearth.kvstore.disk import DiskKVStore
from hearth.kvstore.disk_format import BlockFormat
from hearth.runner.messages import RunnerOutput, SampledToken, SchedulerOutput
from hearth.spec_decode.config import SpeculativeConfig
from hearth.spec_decode.policy import SpeculativeDecoder

from tests.engine.fakes import LetterTokenizer, ScriptedProposer
from tests.engine.test_scheduler import run_all
from tests.test_engine_equivalence import assert_agree

BS = 4
FMT = BlockFormat("fake", BS, 1, (4 * BS,))


class TokenKVRunner:
    """KV "content" = the token ids written at each slot. Every step checks that each position a
    sequence reads holds its token, so a block loaded late, into the wrong id or from a bad file fails.
    Drafts (a chain) are written after the step's tokens and accepted while each is its predecessor + 1
    (as CountingRunner), so rejected ones leave wrong "K/V" behind."""

    def __init__(self, num_blocks: int):
        self.kv = [[-1] * BS for _ in range(num_blocks)]
        self.history: dict[str, list[int]] = {}
        self.steps: list[SchedulerOutput] = []

    def execute(self, so: SchedulerOutput) -> RunnerOutput:
        self.steps.append(so)
        saved = [array("i", self.kv[b]).tobytes() for b, _ in so.kv_saves]
        for block, payload in so.kv_loads:
            self.kv[block] = array("i", bytes(payload)).tolist()
        out, accepted = {}, {}
        for s in so.seqs:
            hist = self.history[s.request_id]
            for p in range(s.start_pos):
                assert self.kv[s.block_ids[p // BS]][p % BS] == hist[p], (s.request_id, p)
            for i, t in enumerate(s.token_ids + s.spec_token_ids):
                p = s.start_pos + i
                self.kv[s.block_ids[p // BS]][p % BS] = t
            if s.sample:
                ok = list(itertools.takewhile(lambda d: d[1] == (d[0] + 1) % 50,
                                              zip(s.token_ids[-1:] + s.spec_token_ids, s.spec_token_ids)))
                accepted[s.request_id] = [SampledToken(d) for _, d in ok]
                out[s.request_id] = SampledToken(((ok[-1][1] if ok else s.token_ids[-1]) + 1) % 50)
                hist.extend([d for _, d in ok] + [out[s.request_id].token_id])
        return RunnerOutput(out, saved, accepted=accepted)


def make(tmp_path, num_blocks=32):
    disk = DiskKVStore(tmp_path, 1 << 20, FMT, fsync=False)
    runner = TokenKVRunner(num_blocks)
    sched = Scheduler(KVCacheManager(num_blocks, BS, b"model|fake", disk=disk), 8, 64)
    return EngineCore(sched, runner, LetterTokenizer(), 256, 50), runner, disk


def generate(engine, runner, rid, prompt, max_tokens=5):
    runner.history[rid] = list(prompt)
    engine.add_request(prompt, SamplingParams(max_tokens=max_tokens, temperature=0), rid)
    outs = run_all(engine)[rid]
    assert engine.scheduler.kv.disk.flush(10)
    return [t for o in outs for t in o.new_token_ids], outs[-1].num_cached_tokens


PROMPT = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]


def test_restart_loads_the_prefix_from_disk_into_fresh_blocks(tmp_path):
    engine, runner, disk = make(tmp_path)
    first, cached = generate(engine, runner, "a", PROMPT)
    assert cached == 0
    assert disk.flush(10) and disk.stats.writes == 3  # 15 tokens computed: 3 full blocks, no step after
    engine, runner, disk = make(tmp_path)  # the restart
    again, cached = generate(engine, runner, "b", PROMPT)
    assert again == first and cached == 8  # (11 - 1) // 4 blocks: one token is always computed
    so = next(so for so in runner.steps if so.seqs)  # idle messages come first
    assert so.seqs[0].start_pos == 8 and [b for b, _ in so.kv_loads] == so.seqs[0].block_ids[:2]
    assert engine.scheduler.kv.stats.disk_hits == 8 and disk.stats.hits == 2
    assert not any(so.kv_saves for so in runner.steps)  # every full block is on disk already


def test_memory_prefix_continues_on_disk(tmp_path):
    engine, runner, _ = make(tmp_path)
    generate(engine, runner, "a", PROMPT)
    engine, runner, disk = make(tmp_path)
    generate(engine, runner, "x", PROMPT[:4] + [40, 41, 42, 43, 44])  # block 0 now in memory too
    hits = disk.stats.hits
    _, cached = generate(engine, runner, "b", PROMPT)
    assert cached == 8 and disk.stats.hits == hits + 1  # block 0 from memory, block 1 from disk
    load = [so for so in runner.steps if any(s.request_id == "b" for s in so.seqs)][0]
    assert len(load.kv_loads) == 1


def test_corrupt_file_ends_the_prefix_and_is_recomputed(tmp_path):
    engine, runner, disk = make(tmp_path)
    first, _ = generate(engine, runner, "a", PROMPT)
    disk.flush(10)
    hashes = engine.scheduler.kv.block_hashes(_request(PROMPT), 2)
    path = disk.path(hashes[1])
    data = bytearray(path.read_bytes())
    data[-20] ^= 0x40
    path.write_bytes(bytes(data))
    engine, runner, disk = make(tmp_path)
    again, cached = generate(engine, runner, "b", PROMPT)
    assert again == first and cached == 4 and disk.stats.corrupt == 1
    disk.flush(10)
    assert bytes(disk.get(hashes[1])) == array("i", PROMPT[4:8]).tobytes()  # rewritten, good this time


def test_export_prefix_gives_the_blocks_from_memory_and_disk(tmp_path):
    engine, runner, _ = make(tmp_path)
    generate(engine, runner, "a", PROMPT)
    engine, runner, disk = make(tmp_path)
    generate(engine, runner, "x", PROMPT[:4] + [40, 41, 42, 43, 44])
    payloads = engine.export_prefix(PROMPT + [12])  # 12 tokens: blocks 0 (memory), 1, 2 (disk)
    assert [array("i", bytes(p)).tolist() for p in payloads] == [PROMPT[:4], PROMPT[4:8], PROMPT[8:] + [12]]


@pytest.mark.parametrize("fails", ["before the loads", "after the loads"])
def test_a_failed_step_leaves_no_hash_on_blocks_it_was_to_load(tmp_path, fails):
    """The runner fails the step that loads a prefix from disk (AsyncEngine then aborts its requests):
    the blocks given to the loads must not stay findable, else the next request with that prefix
    reads K/V that was never written (TokenKVRunner checks every read)."""
    engine, runner, _ = make(tmp_path)
    first, _ = generate(engine, runner, "a", PROMPT)
    engine, runner, disk = make(tmp_path)  # the restart
    kv, real = engine.scheduler.kv, runner.execute
    hashes = kv.block_hashes(_request(PROMPT), 2)

    def failing(so):
        if so.kv_loads and fails == "after the loads":
            real(so)
        if so.kv_loads:
            raise RuntimeError("step failed")
        return real(so)

    runner.execute = failing
    runner.history["b"] = list(PROMPT)
    engine.add_request(PROMPT, SamplingParams(max_tokens=5, temperature=0), "b")
    with pytest.raises(RuntimeError, match="step failed"):
        engine.step()
    b = engine.scheduler.running[0]
    assert b.block_ids == [0, 1, 2] and b.num_computed_tokens == 8  # blocks 0 and 1 were to be loaded
    assert [kv.pool.lookup(h) for h in hashes] == [None, None]  # not findable while loading
    assert engine.failed_step() == ["b"]
    engine.abort("b")
    assert [kv.pool.lookup(h) for h in hashes] == [None, None] and kv.pool.block_hash[:3] == [None] * 3
    assert kv.pool.num_cached == 0 and not kv.pending_loads and not kv.pending_saves
    runner.execute = real
    again, cached = generate(engine, runner, "c", PROMPT)
    assert again == first and cached == 8 and kv.stats.disk_hits == 16  # loaded again, then read right
    assert all(kv.pool.lookup(h) is not None for h in hashes)  # registered once loaded
    assert not any(so.kv_saves for so in runner.steps)  # nothing the disk has is written again


def _fail_next(runner, after_the_forward: bool, times: int = 1):
    """The runner's next `times` calls raise: before it computes anything, or after it wrote this
    step's "K/V" (the real runner reads the saves out first either way)."""
    real, left = runner.execute, [times]

    def failing(so):
        if left[0] <= 0:
            return real(so)
        left[0] -= 1
        if after_the_forward:
            real(so)
        raise RuntimeError("step failed")

    runner.execute = failing


def _fail_step(engine):
    with pytest.raises(RuntimeError, match="step failed"):
        engine.step()
    failed = engine.failed_step()  # what AsyncEngine does: abort the requests of the failed runner call
    for rid in failed:
        engine.abort(rid)
    return failed


def _on_disk(disk, h):
    payload = disk.get(h)
    return None if payload is None else array("i", bytes(payload)).tolist()


@pytest.mark.parametrize("after_the_forward", [False, True], ids=["before the forward", "after the forward"])
def test_blocks_committed_before_a_failed_step_still_reach_the_disk(tmp_path, after_the_forward):
    """The prefill registers two full blocks; the next step, which was to hand them to the disk tier,
    fails: they hold committed K/V all the same, so a later step saves them (not lost)."""
    engine, runner, disk = make(tmp_path)
    kv = engine.scheduler.kv
    hashes = kv.block_hashes(_request(PROMPT), 2)
    runner.history["a"] = list(PROMPT)
    engine.add_request(PROMPT, SamplingParams(max_tokens=5, temperature=0), "a")
    engine.step()  # the prefill: blocks 0 and 1 full and registered, to be saved by the next step
    assert sorted(kv.pending_saves.values()) == [0, 1]
    _fail_next(runner, after_the_forward)
    assert _fail_step(engine) == ["a"]
    run_all(engine)  # the saves alone: one more step
    assert disk.flush(10)
    assert [_on_disk(disk, h) for h in hashes] == [PROMPT[:4], PROMPT[4:8]]


def test_a_block_a_failed_step_reused_is_never_saved_under_its_old_hash(tmp_path):
    """A finished request's full blocks wait, free, for the next step to save them; that step gives
    them to another request (evicting the hashes), writes its "K/V" into them and fails. The disk tier
    must then not store them: their contents are no longer the hashes' K/V."""
    engine, runner, disk = make(tmp_path, num_blocks=4)
    kv = engine.scheduler.kv
    hashes = kv.block_hashes(_request(PROMPT), 2)
    runner.history["a"] = list(PROMPT)
    engine.add_request(PROMPT, SamplingParams(max_tokens=1, temperature=0), "a")
    engine.step()  # "a" ends in its prefill: blocks 0 and 1 free and cached, their saves queued
    other = list(range(20, 33))  # 13 tokens: every block of the pool, the cached ones evicted
    runner.history["b"] = list(other)
    engine.add_request(other, SamplingParams(max_tokens=2, temperature=0), "b")
    _fail_next(runner, after_the_forward=True)
    assert _fail_step(engine) == ["b"]
    failed = [so for so in runner.steps if so.seqs][-1]  # (the idle message after the abort comes last)
    assert sorted(failed.kv_saves) == [(0, hashes[0]), (1, hashes[1])] and {0, 1} <= set(failed.seqs[0].block_ids)
    assert [kv.pool.lookup(h) for h in hashes] == [None, None]
    run_all(engine)
    assert disk.flush(10)
    assert [_on_disk(disk, h) for h in hashes] == [None, None]


@pytest.mark.parametrize("second", ["saves alone", "with a request"])
def test_saves_are_given_back_once(tmp_path, second):
    """A save that fails twice is dropped: where reading it is what fails, every later step (and
    its requests) would fail with it."""
    engine, runner, disk = make(tmp_path)
    runner.history["a"] = list(PROMPT)
    engine.add_request(PROMPT, SamplingParams(max_tokens=5, temperature=0), "a")
    engine.step()
    _fail_next(runner, after_the_forward=False, times=2)
    assert _fail_step(engine) == ["a"] and engine.has_unfinished()  # the saves go back to the queue
    if second == "with a request":
        runner.history["b"] = [40, 41]
        engine.add_request([40, 41], SamplingParams(max_tokens=2, temperature=0), "b")
    assert _fail_step(engine) == ([] if second == "saves alone" else ["b"])
    assert not engine.has_unfinished() and not engine.scheduler.kv.pending_saves  # failed again: dropped
    assert disk.flush(10) and disk.stats.writes == 0


def test_loaded_blocks_become_findable_after_their_step_and_unsent_loads_go_with_an_abort():
    kv = KVCacheManager(8, BS, b"model|fake")
    req, other = _request(PROMPT), _request(PROMPT)
    hashes = kv.block_hashes(req, 2)
    loads = [(hashes[0], b"p0"), (hashes[1], b"p1")]
    assert kv.allocate_slots(req, 3, [], loads)
    assert req.block_ids == [0, 1, 2] and req.num_computed_tokens == 8 and req.num_registered_blocks == 0
    assert kv.pending_loads == [(0, b"p0"), (1, b"p1")] and kv.pool.num_cached == 0
    assert kv.pending_hashes(req) == hashes  # being loaded: nobody else computes them meanwhile
    kv.free(req)  # aborted before its step was sent (a schedule that failed after it)
    assert not kv.pending_loads and kv.pool.num_cached == 0
    assert kv.allocate_slots(other, 3, [], loads)
    assert other.block_ids == [0, 1, 2] and kv.take_transfers() == ([(0, b"p0"), (1, b"p1")], [])
    assert kv.pool.num_cached == 0  # sent, not landed yet
    other.num_computed_tokens += 3  # the step ran: what Scheduler.update does
    kv.cache_full_blocks(other)
    assert [kv.pool.lookup(h) for h in hashes] == [0, 1] and other.num_registered_blocks == 2


def test_the_disk_tier_stores_only_committed_kv_never_rejected_drafts(tmp_path):
    """With drafts, right and wrong at random, crossing block boundaries: every block the disk tier
    holds afterwards is the committed tokens' "K/V", read back from the file."""
    rng = random.Random(0)

    def drafts(r):
        last = r.output_token_ids[-1]
        return [(last + 1 + i) % 50 if rng.random() < 0.7 else 13 for i in range(4)]

    disk = DiskKVStore(tmp_path, 1 << 20, FMT, fsync=False)
    runner, kv = TokenKVRunner(64), KVCacheManager(64, BS, b"model|fake", disk=disk)
    spec = SpeculativeDecoder(SpeculativeConfig(num_speculative_tokens=4, disable_by_batch_size=0))
    spec.proposer = ScriptedProposer(drafts)
    engine = EngineCore(Scheduler(kv, 8, 64), runner, LetterTokenizer(), 256, 50, spec)
    runner.history["a"] = list(PROMPT)
    engine.add_request(PROMPT, SamplingParams(max_tokens=40, temperature=0, ignore_eos=True), "a")
    outs = run_all(engine)["a"]
    assert disk.flush(10)
    committed = PROMPT + [t for o in outs for t in o.new_token_ids]
    rejected = [so for so in runner.steps for s in so.seqs if s.spec_token_ids and 13 in s.spec_token_ids]
    assert len(rejected) > 3  # wrong drafts were written, in several steps
    stored = [disk.get(h) for h in chain_hashes(kv.cache_key, committed, BS)]
    stored = [None if p is None else array("i", bytes(p)).tolist() for p in stored]
    assert stored == [committed[i:i + BS] for i in range(0, len(committed) // BS * BS, BS)]
    assert disk.stats.writes == len(stored)


def _request(prompt):
    from hearth.engine.request import Request

    return Request("h", prompt, SamplingParams(), frozenset(), 256)


@pytest.mark.parametrize("then", ["a later call", "close"])
def test_a_tiny_model_s_blocks_reach_the_disk_after_a_failed_decode_step(tmp_path, then):
    """LLM on a tiny random model: the decode step that was to save the prefill's blocks fails after
    reading them (generate raises); the next call, or close, saves them, with the bytes a run without
    the failure stores."""
    from tests.gguf_factory import write_tiny_gguf

    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, "llama")
    prompt, p = list(range(5, 45)), SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)
    clean = LLM(str(path), progress=False, block_size=16, kv_disk_dir=str(tmp_path / "clean"))
    clean.generate({"prompt_token_ids": prompt}, p)
    clean.close()
    llm = LLM(str(path), progress=False, block_size=16, kv_disk_dir=str(tmp_path / "failed"))
    hashes = llm.engine.scheduler.kv.block_hashes(_request(prompt), 2)
    run, calls = llm.runner._execute, []

    def failing(so):
        calls.append(so)
        if len(calls) == 2:  # the first decode: it reads the prefill's two full blocks out, then fails
            assert sorted(h for _, h in so.kv_saves) == sorted(hashes)
            raise RuntimeError("step failed")
        return run(so)

    llm.runner._execute = failing
    with pytest.raises(RuntimeError, match="step failed"):
        llm.generate({"prompt_token_ids": prompt}, p)
    if then == "a later call":
        llm.generate({"prompt_token_ids": [1, 2, 3]}, p)  # runs the saves first
    llm.close()
    assert all(llm.disk.get(h) is not None for h in hashes)
    assert [bytes(llm.disk.get(h)) for h in hashes] == [bytes(clean.disk.get(h)) for h in hashes]


# -- SmolLM2 -----------------------------------------------------------------------------------

GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, logprobs=1000)
LONG = ("The lighthouse keeper wrote in his log every evening: the weather, the ships that passed, "
        "and the small events of the island. ") * 4


@pytest.fixture(scope="module")
def served_once(model_path, tmp_path_factory):
    """codec -> (LLM kwargs with a disk dir where LONG was served, cold result, in-memory hit result)."""
    runs = {}

    def get(codec: str):
        if codec not in runs:
            kw = dict(progress=False, max_model_len=1024, kv_cache_dtype=codec, max_logprobs=-1,  # GREEDY's 1000
                      kv_disk_dir=str(tmp_path_factory.mktemp(f"disk-{codec}")))
            llm = LLM(str(model_path("smollm2-135m")), **kw)
            cold = llm.generate(LONG, GREEDY)[0]
            warm = llm.generate(LONG, GREEDY)[0]  # an in-memory hit: the same K/V bytes a disk hit loads
            llm.close()
            runs[codec] = kw, cold, warm
        return runs[codec]

    return get


@pytest.mark.parametrize("codec", ["f16", "q8_0"])
def test_smollm2_restart_serves_prompt_from_disk(model_path, smol_llm, served_once, codec):
    kw, cold, warm = served_once(codec)
    n = len(cold.prompt_token_ids)
    assert cold.num_cached_tokens == 0 and warm.num_cached_tokens == (n - 1) // 16 * 16
    again = LLM(str(model_path("smollm2-135m")), **kw)
    restored = again.generate(LONG, GREEDY)[0]
    again.close()
    assert restored.num_cached_tokens == (n - 1) // 16 * 16
    assert again.engine.scheduler.kv.stats.disk_hits == restored.num_cached_tokens
    assert restored.outputs[0].token_ids == warm.outputs[0].token_ids  # same bytes, same kernels
    assert_agree(restored.outputs[0], cold.outputs[0])
    if codec == "f16":  # and a cold run of another engine
        smol_llm.engine.scheduler.kv.pool.reset_prefix_cache()
        assert_agree(restored.outputs[0], smol_llm.generate(LONG, GREEDY)[0].outputs[0])


def test_smollm2_corrupt_block_is_recomputed(model_path, served_once, tmp_path):
    kw, cold, _ = served_once("f16")
    shutil.copytree(kw["kv_disk_dir"], tmp_path, dirs_exist_ok=True)
    kw = {**kw, "kv_disk_dir": str(tmp_path)}
    again = LLM(str(model_path("smollm2-135m")), **kw)
    hashes = again.engine.scheduler.kv.block_hashes(_request(cold.prompt_token_ids), 3)
    victim = again.disk.path(hashes[2])
    victim.write_bytes(victim.read_bytes()[:-1000])  # truncated, as by a crash of a non-atomic writer
    got = again.generate(LONG, GREEDY)[0]
    again.close()
    assert got.num_cached_tokens == 32 and again.disk.stats.corrupt == 1
    assert_agree(got.outputs[0], cold.outputs[0])
