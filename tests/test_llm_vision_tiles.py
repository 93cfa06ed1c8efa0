"""SmolVLM-style images end to end: LLM(mmproj=) with a tiny Idefics3 projector on a tiny llama LM as wide as
it; LLM.chat with an image that HF's processor splits (its default) reads a MediaInput per tile and one for
the global image, in the processor's order, each with its own text before it."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from PIL import Image

from hearth import LLM, SamplingParams
from hearth.llm_vision import tokens_prompt
from hearth.media.images import prepare_image
from tests import mmproj_factory

GREEDY = SamplingParams(temperature=0, max_tokens=4, logprobs=3)


def png(w: int, h: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(out, "PNG")
    return out.getvalue()


def asking(data: bytes, text: str = "what is it?") -> list[dict]:
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    return [{"role": "user", "content": [{"type": "text", "text": "look:"},
                                         {"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": text}]}]


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiles")
    # the tags around tiles are plain text to this byte-level vocab: ~40 ids each
    model, mmproj, _ = mmproj_factory.tiny_vision_model(d, "llama", "idefics3", context=1024)
    return LLM(str(model), mmproj=str(mmproj), max_model_len=1024, progress=False)


@pytest.mark.parametrize("size, pieces", [((71, 45), 5), ((30, 97), 3), ((250, 40), 3)])
def test_a_split_image_is_a_span_per_tile_in_the_processors_order(llm, size, pieces):
    """96 px longest edge, 64 px tiles: 71 x 45 -> 2 x 2 tiles, 30 x 97 -> 2 x 1, 250 x 40 -> 1 x 2; then the
    global image. Each span's rows are its own piece's (its pixels), text between them (row/col tags)."""
    data = png(*size, seed=size[0])
    ids = llm.encode_chat(asking(data))
    prepared = prepare_image(data, llm.vision_config)
    assert len(ids.media) == len(prepared.befores) == pieces
    for m, pixels, digest in zip(ids.media, prepared.pixels, prepared.digests, strict=True):
        assert (m.length, m.digest, m.bidirectional) == (llm.vision_config.num_embeds, digest, False)
        np.testing.assert_array_equal(m.pixels, pixels)
    for a, b in zip(ids.media, ids.media[1:]):
        assert b.offset > a.end  # the next tile's tag between them
    out = llm.chat(asking(data), GREEDY)[0]
    again = llm.generate(tokens_prompt(ids), GREEDY)[0]
    assert len(out.outputs[0].token_ids) == 4 and again.outputs[0].token_ids == out.outputs[0].token_ids
    assert again.num_cached_tokens >= ids.media[-1].offset  # every tile's blocks found again


def test_a_tile_changed_is_its_span_changed(llm):
    """The right half of a picture inverted: the left column of tiles keeps its digests (the same KV and rows),
    the right column and the global image do not, and the answer's logprobs move."""
    img = np.random.default_rng(1).integers(0, 256, (45, 71, 3), dtype=np.uint8)
    changed = img.copy()
    changed[:, 45:] = 255 - changed[:, 45:]  # x >= 45 of 71 -> x >= ~81 of the 128 x 128 grid: right tiles only
    answers, spans = [], []
    for pixels in (img, changed):
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, "PNG")
        spans.append([m.digest for m in llm.encode_chat(asking(buf.getvalue())).media])
        answers.append(llm.chat(asking(buf.getvalue()), GREEDY)[0].outputs[0])
    (a, b) = spans
    assert len(a) == 5 and [x == y for x, y in zip(a, b)] == [True, False, True, False, False]
    assert answers[1].logprobs[0] != pytest.approx(answers[0].logprobs[0], abs=1e-3)
