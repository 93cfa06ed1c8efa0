"""Images encoded ahead of and beside the steps (MediaRows' EncodeWorker): while one request's image is
being encoded (a fake encoder held on an Event), the other requests' steps go on and finish; no chunk
reaches an image before its rows are in (the text before it goes meanwhile); the image request then
gives what the in-step encode gives, from the same rows; an aborted request's queued encode is dropped (an
abort during a step too, before the worker reaches it); a failing encode ends its request only; an image
encoded already is not encoded again."""

from __future__ import annotations

import threading

import pytest
import torch

from hearth import LLM, SamplingParams
from hearth.engine.engine_core import MediaEncodeError
from hearth.layers.linear import use_linear_policy
from hearth.media.inputs import MediaInput

from tests.backends.test_media_embeds import IMAGE_AT, IMAGE_LEN, FakeEncoder, assert_same, image, prompt_ids
from tests.gguf_factory import tiny_dir

HOLD_S = 10  # a held encode gives up after this (the in-step encode would hold the step that long)


class Gated(FakeEncoder):
    """FakeEncoder that waits for `gate` before encoding the seeds in `held`, and raises on seed 66."""

    def __init__(self, hidden: int, held=()):
        super().__init__(hidden)
        self.gate, self.held, self.seeds = threading.Event(), set(held), []

    def encode(self, pixels) -> torch.Tensor:
        self.seeds.append(pixels[0])
        if pixels[0] in self.held and not self.gate.wait(HOLD_S):
            raise TimeoutError("the test never opened the gate")
        if pixels[0] == 66:
            raise RuntimeError("the tower fell over")
        return super().encode(pixels)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d, name, dims = tiny_dir(tmp_path_factory.mktemp("llama"), "llama")
    with use_linear_policy(exact=True):
        llm = LLM(str(d / name), max_model_len=128, block_size=4, progress=False, max_num_batched_tokens=64,
                  max_num_seqs=4)
    return llm, dims


@pytest.fixture
def engine(tiny):
    """(engine, dims, the SchedulerOutputs it ran): a fresh Gated encoder (ahead), nothing cached."""
    llm, dims = tiny
    engine = llm.engine
    engine.scheduler.kv.pool.reset_prefix_cache()
    engine.runner.set_vision(Gated(dims.hidden))
    steps = []
    execute = engine.runner.execute
    engine.runner.execute = lambda so: steps.append(so) or execute(so)
    yield engine, dims, steps
    del engine.runner.execute
    engine.runner.vision.gate.set()
    for rid in [r.request_id for r in (*engine.scheduler.running, *engine.scheduler.waiting)]:
        engine.abort(rid)


GREEDY = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, logprobs=3)
TEXT = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, logprobs=3)


def drain(engine, outs: dict, steps: int | None = None) -> dict:
    """Step until nothing is left (or `steps` times): request id -> (tokens, logprobs, error)."""
    n = 0
    while engine.has_unfinished() and (steps is None or n < steps):
        for o in engine.step():
            tokens, logprobs, _ = outs.setdefault(o.request_id, ([], [], None))
            tokens += o.new_token_ids
            logprobs += o.new_logprobs or []
            if o.error is not None:
                outs[o.request_id] = (tokens, logprobs, o.error)
        n += 1
    return outs


def alone(engine, ids, params, media=()) -> tuple:
    """What the request gives alone, its image encoded inside the step (today's path), nothing cached."""
    runner, vision = engine.runner, engine.runner.vision
    runner.encode_ahead = False
    runner.set_vision(FakeEncoder(vision.hidden))
    try:
        engine.scheduler.kv.pool.reset_prefix_cache()
        rid = engine.add_request(ids, params, media=list(media))
        tokens, logprobs, _ = drain(engine, {})[rid]
        engine.scheduler.kv.pool.reset_prefix_cache()
        return tokens, logprobs
    finally:
        del runner.encode_ahead
        runner.set_vision(vision)


def chunks(steps, rid):
    return [(s.start_pos, len(s.token_ids)) for so in steps for s in so.seqs if s.request_id == rid]


def test_other_requests_decode_while_an_image_encodes_and_the_image_request_then_gives_todays_answer(engine):
    engine, dims, steps = engine
    text_ids = [9] + prompt_ids()[1:12]
    want_text = alone(engine, text_ids, TEXT)
    want_image = alone(engine, prompt_ids(), GREEDY, [image(5)])
    engine.runner.vision.held.add(5)
    img = engine.add_request(prompt_ids(), GREEDY, media=[image(5)])
    text = engine.add_request(text_ids, TEXT)
    outs = drain(engine, {}, steps=12)  # the encoder is held all along
    assert_same(outs[text][:2], want_text)
    assert len(outs[text][0]) == 8 and not outs.get(img, ([],))[0]  # text finished; the image request waits
    assert chunks(steps, img) == [(0, IMAGE_AT)]  # the text before the image went, nothing of the image
    assert engine.runner.vision.seeds == [5]  # announced at the first step, encoding on the worker
    engine.runner.vision.gate.set()
    got = drain(engine, outs)[img]
    assert got[2] is None
    assert_same(got[:2], want_image)
    assert all(not (start < IMAGE_AT + IMAGE_LEN and start + n > IMAGE_AT) or start <= IMAGE_AT
               for start, n in chunks(steps, img))
    rows = engine.runner.media.encoded[image(5).digest]
    assert torch.equal(rows, FakeEncoder(dims.hidden).encode((5, IMAGE_LEN)))  # the in-step encode's rows, bit for bit


def test_no_chunk_reaches_an_image_before_its_rows_are_in(engine):
    engine, dims, steps = engine
    engine.runner.vision.held.add(1)
    media = [MediaInput(2, 4, b"a", (1, 4)), MediaInput(12, 4, b"b", (2, 4))]  # a held, b not
    rid = engine.add_request(prompt_ids()[:20], GREEDY, media=media)
    drain(engine, {}, steps=5)
    assert chunks(steps, rid) == [(0, 2)]  # b is in, but it comes after a
    engine.runner.vision.gate.set()
    outs = drain(engine, {})
    assert len(outs[rid][0]) == 6 and outs[rid][2] is None
    assert engine.runner.vision.seeds == [1, 2]  # FCFS, each once


def test_an_aborted_requests_queued_encode_is_dropped_and_the_engine_goes_idle(engine):
    engine, dims, steps = engine
    vision = engine.runner.vision
    vision.held.add(7)
    first = engine.add_request(prompt_ids(), GREEDY, media=[image(7)])
    second = engine.add_request([9] + prompt_ids()[1:], GREEDY, media=[image(8)])  # queued behind 7
    drain(engine, {}, steps=2)
    engine.abort(second)
    engine.abort(first)  # while its encode runs
    vision.gate.set()
    engine.runner.media.worker.wait(5)
    assert not engine.has_unfinished()
    assert vision.seeds == [7]  # 8 never encoded
    text = engine.add_request([9] + prompt_ids()[1:12], TEXT)  # the engine goes on
    outs = drain(engine, {})
    assert list(outs) == [text] and len(outs[text][0]) == 8
    assert not engine.runner.media.waiters and image(7).digest in engine.runner.media.encoded  # kept, unused


def test_an_abort_during_a_step_drops_the_queued_encode_before_the_next_step(engine):
    """AsyncEngine hands an abort to the runner at once (ModelRunner.abort_soon) while the engine thread may be
    inside a long step: the aborted request's queued encode goes before the worker reaches it, not only at the
    next step's finished_request_ids (by then the worker had started it: ~50 s of a SigLIP encode for nobody)."""
    engine, dims, steps = engine
    vision = engine.runner.vision
    vision.held.add(7)
    first = engine.add_request(prompt_ids(), GREEDY, media=[image(7)])
    second = engine.add_request([9] + prompt_ids()[1:], GREEDY, media=[image(8)])  # queued behind 7
    drain(engine, {}, steps=2)
    engine.runner.abort_soon(second)  # no engine step runs from here until the worker has settled
    vision.gate.set()
    for m in (image(7), image(8)):
        engine.runner.media.worker.wait(5, digest=m.digest)
    assert vision.seeds == [7]  # 8 never encoded
    engine.abort(second)  # the engine thread takes it between steps
    outs = drain(engine, {})
    assert list(outs) == [first] and len(outs[first][0]) == 6 and outs[first][2] is None
    assert not engine.runner.media.waiters and engine.runner.media.encoding == 0


def test_a_failing_encode_ends_its_request_only_while_the_others_go_on(engine):
    engine, dims, steps = engine
    text_ids = [9] + prompt_ids()[1:12]
    want_text = alone(engine, text_ids, TEXT)
    engine.runner.vision.held.add(66)
    bad = engine.add_request([8] + prompt_ids()[1:], GREEDY, media=[image(66)])
    text = engine.add_request(text_ids, TEXT)
    outs = drain(engine, {}, steps=10)
    assert len(outs[text][0]) == 8 and bad not in outs
    engine.runner.vision.gate.set()
    outs = drain(engine, outs)
    assert isinstance(outs[bad][2], MediaEncodeError) and "the tower fell over" in str(outs[bad][2])
    assert outs[bad][0] == [] and engine.scheduler.kv.pool.num_free == engine.scheduler.kv.pool.num_blocks
    assert_same(outs[text][:2], want_text)


def test_an_image_encoded_already_or_inside_a_prefix_cache_hit_is_not_encoded_again(engine):
    """(Today's in-step encode never encoded either: this holds the ahead path to it.)"""
    engine, dims, steps = engine
    first = engine.add_request(prompt_ids(), GREEDY, media=[image(3)])
    want = drain(engine, {})[first]
    again = engine.add_request(prompt_ids(), GREEDY, media=[image(3)])  # its rows kept, and a prefix-cache hit
    assert drain(engine, {})[again][0] == want[0]
    engine.runner.media.encoded.clear()  # the rows gone, the K/V still cached
    hit = engine.add_request(prompt_ids(), GREEDY, media=[image(3)])
    assert drain(engine, {})[hit][0] == want[0]
    assert engine.runner.vision.seeds == [3]
    assert chunks(steps, hit)[0] == (24, 2)  # the hit: past the image


def test_a_new_encoder_takes_over_the_images_being_encoded(engine):
    """ModelRunner.set_vision between steps: the image a request waits for is encoded by the new encoder."""
    engine, dims, steps = engine
    old = engine.runner.vision
    old.held.add(4)
    rid = engine.add_request(prompt_ids(), GREEDY, media=[image(4)])
    drain(engine, {}, steps=2)
    engine.runner.set_vision(Gated(dims.hidden))
    old.gate.set()  # the old worker's job ends unread
    outs = drain(engine, {}, steps=100)  # (an image nobody encodes would wait forever: 50 ms a step)
    assert len(outs[rid][0]) == 6 and outs[rid][2] is None
    assert engine.runner.vision.seeds == [4]
