"""A Qwen-VL mmproj through LLM.chat, on a tiny LM without M-RoPE (the qwen2vl LM is the other helper's): an
image's rows are as many as its own grid (not a fixed count), its pixels the 4-d merge-unit patches, and they
reach the LM. The M-RoPE positions of those rows (PreparedImage.grid -> MediaInput) on a qwen2vl LM:
tests/test_llm_vision_qwen_e2e.py (against transformers' whole model)."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from hearth import LLM, SamplingParams
from hearth.llm_vision import reads_images
from hearth.media.images import prepare_image
from tests import mmproj_factory
from tests.test_llm_vision import asking

GREEDY = SamplingParams(temperature=0, max_tokens=3, logprobs=3)


def png(size: tuple[int, int], color: tuple[int, int, int]) -> bytes:
    out = io.BytesIO()
    img = Image.new("RGB", size, color)
    img.putpixel((3, 5), (255 - color[0], 7, 200))
    img.save(out, "PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    model, mmproj, _ = mmproj_factory.tiny_vision_model(tmp_path_factory.mktemp("qwen"), "llama", "qwen2.5vl_merger")
    return LLM(str(model), mmproj=str(mmproj), max_model_len=512, progress=False)


@pytest.mark.parametrize("size", [(71, 45), (30, 97), (196, 308)])
def test_an_images_rows_are_its_own_grid(llm, size):
    data = png(size, (200, 30, 30))
    image = prepare_image(data, llm.vision_config)
    (span,) = llm.encode_chat(asking(data)).media
    rows, cols = image.grid
    assert span.length == image.num_embeds == rows * cols and span.pixels.shape == (rows, cols, 4, 1176)
    assert not span.bidirectional
    red = llm.chat(asking(data), GREEDY)[0].outputs[0]
    blue = llm.chat(asking(png(size, (20, 30, 220))), GREEDY)[0].outputs[0]
    assert blue.logprobs[0] != pytest.approx(red.logprobs[0], abs=1e-3)  # the rows are the image's


def test_the_startup_line_says_at_most(llm):
    assert reads_images(llm.vision_config, "m.gguf") == \
        "reads images (mmproj m.gguf: qwen2.5vl_merger projector, 4096 tokens an image at most)"
