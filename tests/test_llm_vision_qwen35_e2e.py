"""Qwen3.5 with images end to end (`hearth serve QWEN35.gguf --mmproj MMPROJ.gguf`): a tiny random transformers
Qwen3_5ForConditionalGeneration (and Qwen3_5MoeForConditionalGeneration) written as llama.cpp's converter writes its
`qwen35` (`qwen35moe`) LM and its qwen3vl_merger mmproj (tests/hf_qwen35vl.py), then hearth's LLM.chat with one
image and with two against transformers fed the same chat as Qwen3VLProcessor writes it
(tests/test_llm_vision_qwen_e2e.py's helpers): prompt ids equal, the first step's logits close, greedy tokens the
same. What counts: the tower's rows (no deepstack parts: Qwen3.5's tower has none), each image's M-RoPE rows through
the gated attention layers' partial interleaved rope (the positions Qwen3-VL's text model takes:
Qwen3_5Model.get_rope_index is Qwen3-VL's), the text after an image at index + delta, and the DeltaNet layers
reading the image rows as any rows. Beside it: a prefix-cache hit restores a recurrent state snapshot only behind
the same image, also one that ends inside an image, and a chunked prefill that cuts through the images answers as
one step."""

from __future__ import annotations

import pytest
import torch

from hearth import LLM, SamplingParams
from hearth.layers.linear import use_linear_policy
from hearth.runner.messages import ScheduledSequence, SchedulerOutput
from tests.backends.test_media_embeds import rel_err
from tests.hf_qwen35vl import tiny_qwen35_vl
from tests.test_llm_vision_qwen_e2e import ONE, QWEN3_VL_TEMPLATE, STEPS, TWO, chats, png, theirs

GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
WITH_LOGPROBS = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, logprobs=1)
SAME_TOL = 1e-4
"""A cached prefix against the engine's own uncached run: each token's logprob (measured within 1.3e-5; a cut
image's rows at text positions: 0.05 to 0.1)."""
REL_TOL = 2e-3
"""First-step logits at the last row, max |ours - theirs| / max |theirs| (exact linears over an f32 file, hearth's
K/V f16): measured 5.6e-5 (one image) and 3.3e-4 (two); MoE 3.1e-4 and 3.2e-4. Broken: every image row at
(t, t, t) (its h and w lost) gives 7.3e-3 / 5.9e-2; no M-RoPE at all (1-D positions without the images' delta)
0.07 / 0.10."""
LOGPROB_TOL = 5e-3
"""Each generated token's logprob (measured within 1e-4)."""


def runner_logits(llm: LLM, ids: list[int], media: list) -> torch.Tensor:
    """[T, vocab]: the runner's forward over the whole prompt in one step, in a state slot no request holds (fresh
    blocks, then forgotten): tests.backends.test_media_embeds.runner_logits with a recurrent state."""
    runner, kv = llm.engine.runner, llm.engine.scheduler.kv
    seq = ScheduledSequence("ref", ids, 0, list(range(-(-len(ids) // kv.block_size))), False, SamplingParams(), [],
                            media=list(media), state_slot=kv.free_states[-1])
    try:
        with torch.inference_mode():
            return runner.model.compute_logits(runner.forward(SchedulerOutput([seq])))
    finally:
        runner.forget(["ref"])


@pytest.fixture(scope="module", params=["qwen35", "qwen35moe"])
def pair(request, tmp_path_factory):
    """(hearth's LLM on exact linears, transformers' model, (tokenizer, image processor, template)) of the dense
    Qwen3.5 and of Qwen3.5-MoE."""
    lm, mmproj, hf, processor = tiny_qwen35_vl(tmp_path_factory.mktemp(request.param), QWEN3_VL_TEMPLATE,
                                               request.param)
    return exact_llm(lm, mmproj), hf, processor


def exact_llm(lm, mmproj, **kw) -> LLM:
    with use_linear_policy(exact=True):
        return LLM(str(lm), mmproj=str(mmproj), max_model_len=256, progress=False, **kw)


@pytest.mark.parametrize("images", [ONE, TWO], ids=["one-image", "two-images"])
def test_chat_equals_transformers_through_its_processor(pair, images):
    llm, hf, processor = pair
    messages, typed = chats(images)
    their_ids, their_logits, their_tokens, their_logprobs = theirs(hf, processor, typed, images)
    ids = llm.encode_chat(messages)
    assert list(ids) == their_ids
    assert [m.grid for m in ids.media] and all(m.grid for m in ids.media)
    ours = runner_logits(llm, list(ids), list(ids.media))[-1]
    assert rel_err(ours, their_logits) < REL_TOL
    llm.engine.scheduler.kv.pool.reset_prefix_cache()
    out = llm.chat(messages, SamplingParams(temperature=0, max_tokens=STEPS, ignore_eos=True, logprobs=1))[0].outputs[0]
    assert out.token_ids == their_tokens
    ours_lp = [lp[t] for lp, t in zip(out.logprobs, out.token_ids, strict=True)]
    assert ours_lp == pytest.approx(their_logprobs, abs=LOGPROB_TOL)


def test_a_state_snapshot_never_restores_across_another_image(pair):
    """A prompt with image A, then the same prompt longer: a hit past the image, its recurrent state restored from
    the snapshot after A's rows. The same longer prompt with image B (same size: the same ids and grid) must not
    restore it: the snapshot is keyed by its block's hash, which chains every block's image digest and grid
    (hearth.engine.media_spans.block_salt). Each output equals the engine's without prefix caching."""
    llm, _, _ = pair
    lm, mmproj = llm.config.model, llm.config.mmproj
    cached_llm = exact_llm(lm, mmproj, block_size=8)
    plain_llm = exact_llm(lm, mmproj, block_size=8, enable_prefix_caching=False)
    extra = [ord(c) for c in " tell me more"]
    a, b = (llm.encode_chat(chats([img])[0]) for img in (ONE[0], png((71, 45), 4)))
    assert list(a) == list(b) and [m.grid for m in a.media] == [m.grid for m in b.media]
    assert a.media[0].digest != b.media[0].digest
    end = a.media[0].end

    def run(engine, ids, more=()):
        prompt = {"prompt_token_ids": list(ids) + list(more), "media": list(ids.media)}
        out = engine.generate([prompt], GREEDY)[0]
        return list(out.outputs[0].token_ids), out.num_cached_tokens

    run(cached_llm, a)
    out_a, hit_a = run(cached_llm, a, extra)
    assert hit_a >= end  # restored from the state after A's rows
    out_b, hit_b = run(cached_llm, b, extra)
    assert hit_b <= a.media[0].offset  # nothing past B's first row comes from A
    assert (out_a, 0) == run(plain_llm, a, extra) and (out_b, 0) == run(plain_llm, b, extra)
    assert out_a != out_b  # the images tell apart (else this would show nothing)


def test_a_chunked_prefill_cuts_through_the_images(pair):
    """Steps of 8 tokens: each image's rows come over several steps (Qwen's images are causal: cut anywhere), the
    DeltaNet state and each cut image's M-RoPE rows carried across the cuts; the answer is the one-step prefill's."""
    llm, _, _ = pair
    ids = llm.encode_chat(chats(TWO)[0])
    prompt = {"prompt_token_ids": list(ids), "media": list(ids.media)}
    chunked = exact_llm(llm.config.model, llm.config.mmproj, max_num_batched_tokens=8, enable_prefix_caching=False)
    llm.engine.scheduler.kv.pool.reset_prefix_cache()
    whole = llm.generate([prompt], GREEDY)[0].outputs[0].token_ids
    assert chunked.generate([prompt], GREEDY)[0].outputs[0].token_ids == whole


def test_a_hit_that_ends_inside_an_image_restores_there_and_encodes_the_rest(pair):
    """Blocks of 8, the image's rows at [11, 23): a first prompt ending with them leaves its snapshot at 16, inside the
    image; the whole prompt then hits those 16 tokens, restores that state and takes rows 16.. from the encoder."""
    llm, _, _ = pair
    ids = llm.encode_chat(chats(ONE)[0])
    (image,) = ids.media
    assert image.offset < 16 < image.end
    cached_llm = exact_llm(llm.config.model, llm.config.mmproj, block_size=8)
    plain_llm = exact_llm(llm.config.model, llm.config.mmproj, block_size=8, enable_prefix_caching=False)
    cut = {"prompt_token_ids": list(ids)[:image.end], "media": [image]}  # its last full block ends at 16
    whole = {"prompt_token_ids": list(ids), "media": [image]}
    cached_llm.generate([cut], GREEDY)
    out = cached_llm.generate([whole], WITH_LOGPROBS)[0]
    assert out.num_cached_tokens == 16
    ref = plain_llm.generate([whole], WITH_LOGPROBS)[0].outputs[0]
    assert out.outputs[0].token_ids == ref.token_ids
    assert picked(out.outputs[0]) == pytest.approx(picked(ref), abs=SAME_TOL)


def picked(out) -> list[float]:
    return [lp[t] for lp, t in zip(out.logprobs, out.token_ids, strict=True)]
