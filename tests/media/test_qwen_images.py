"""Qwen2-VL / Qwen2.5-VL images against transformers' Qwen2VLImageProcessor (PIL backend): smart_resize at odd,
tiny (min_pixels), large (max_pixels) and extreme sizes, the pixels bit for bit (its pixel_values, merge-unit
order, each patch's two equal frames), the grid the LM's M-RoPE reads; and the prompt text as the Qwen2-VL chat
template and processor write an image, once."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from PIL import Image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as hf_smart_resize

from hearth.api.chat_template import ChatTemplate
from hearth.api.media_parts import RequestImages, Vision
from hearth.api.messages import openai_messages
from hearth.errors import ModelLoadError
from hearth.media.config import read_vision_config
from hearth.media.images import prepare_image
from hearth.media.marker import MARKER
from hearth.media.merge_units import smart_resize
from tests.media.qwen_pixels import assert_same_as_hf, hf_pixels, png
from tests.mmproj_factory import tiny_hf, write_settings_only
from tests.mmproj_qwen import MAX_PIXELS, MIN_PIXELS, QWEN, UNIT, hf_processor, write_mmproj

SMALL_MAX = 40 * UNIT
"""A file naming its own image_max_pixels (clip.vision.image_max_pixels): reached by a 300 px image, cheaply."""


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    """(projector, max_pixels written or None) -> its VisionConfig."""
    out = {}
    for name in QWEN:
        model = tiny_hf(name)
        for limit in (None, SMALL_MAX):
            path = tmp_path_factory.mktemp("qwen") / f"{name}-{limit}.gguf"
            write_mmproj(path, name, model, max_pixels=limit)
            out[name, limit] = read_vision_config(path)
    return out


SIZES = {  # (w, h) -> (rows, cols) of merged rows with llama.cpp's limits (8 to 4096 rows)
    "wide-odd": ((71, 45), (3, 4)),  # 45 x 71 -> 56 x 84 is 6 rows: up to 8 by min_pixels
    "tall": ((30, 97), (6, 2)),
    "tiny": ((5, 3), (3, 4)),  # rounds to 0 x 0: min_pixels alone decides
    "one-pixel": ((1, 1), (3, 3)),
    "square": ((56, 56), (3, 3)),
    "partial-windows": ((196, 308), (11, 7)),
    "wide-large": ((300, 200), (7, 11)),
    "thin": ((400, 9), (1, 19)),  # ratio 44: allowed; 9 rounds to 0, so min_pixels scales both up
}


@pytest.mark.parametrize("case", SIZES)
@pytest.mark.parametrize("name", QWEN)
def test_pixels_and_grid_equal_the_hf_processor(configs, name, case):
    (w, h), grid = SIZES[case]
    data = png(w, h, seed=w * h)
    got = prepare_image(data, configs[name, None])
    assert_same_as_hf(got, hf_pixels(hf_processor(), data), grid, 3 * 2 * 14 * 14)
    assert len(got.befores) == len(got.digests) == 1


@pytest.mark.parametrize("size", [(300, 200), (120, 800), (400, 399)])
def test_max_pixels_from_the_file(configs, size):
    """A file's clip.vision.image_max_pixels bounds the area (floored to multiples of 28), as the processor's."""
    cfg = configs["qwen2.5vl_merger", SMALL_MAX]
    data = png(*size)
    got = prepare_image(data, cfg)
    hf = hf_pixels(hf_processor(max_pixels=SMALL_MAX), data)
    np.testing.assert_array_equal(got.pixels.reshape(-1, 3 * 2 * 14 * 14), hf["pixel_values"])
    assert got.num_embeds <= 40 and got.num_embeds * 4 == len(hf["pixel_values"])
    assert (cfg.min_pixels, cfg.max_pixels, cfg.num_embeds) == (MIN_PIXELS, SMALL_MAX, 40)


def test_smart_resize_equals_hfs():
    for h in (1, 3, 13, 14, 27, 28, 29, 41, 42, 55, 97, 333, 1000, 4000):
        for w in (1, 5, 14, 15, 42, 43, 70, 199, 768, 3000):
            if max(h, w) / min(h, w) <= 200:
                assert smart_resize(h, w, 28, MIN_PIXELS, MAX_PIXELS) == \
                    hf_smart_resize(h, w, 28, MIN_PIXELS, MAX_PIXELS), (h, w)


def test_an_aspect_over_200_is_one_line(configs):
    with pytest.raises(ValueError, match=r"image is 403x2 pixels: one side is more than 200 times the other") as e:
        prepare_image(png(403, 2), configs["qwen2vl_merger", None])
    assert "\n" not in str(e.value)


def test_digest_names_the_grid(configs):
    """A flat image as 2 x 3 rows and as 3 x 2: the same values, as many, in other places: other rows."""
    cfg = configs["qwen2vl_merger", None]
    flat = [io.BytesIO() for _ in range(2)]
    Image.new("RGB", (84, 56), (9, 99, 199)).save(flat[0], "PNG")
    Image.new("RGB", (56, 84), (9, 99, 199)).save(flat[1], "PNG")
    wide, tall = (prepare_image(b.getvalue(), cfg) for b in flat)
    assert (wide.grid, tall.grid) == ((3, 4), (4, 3)) and wide.pixels.tobytes() == tall.pixels.tobytes()
    assert wide.digests != tall.digests


QWEN2_VL_TEMPLATE = (  # Qwen2-VL-2B-Instruct's tokenizer_config.json chat_template (Qwen2.5-VL's is the same)
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}"
    "<|im_end|>\n{% else %}{% for content in message['content'] %}{% if content['type'] == 'image' or 'image' in "
    "content or 'image_url' in content %}{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}"
    "Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>{% elif content['type'] "
    "== 'video' or 'video' in content %}{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}"
    "Video {{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>{% elif 'text' in content %}"
    "{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}"
    "<|im_start|>assistant\n{% endif %}")


@pytest.mark.parametrize("name", QWEN)
def test_the_prompt_holds_each_image_once_as_the_processor_writes_it(configs, name):
    """hearth's marker sits in string content, which the template writes as text (it writes vision_start, one
    pad and vision_end only for a typed image part): the image's own text then comes once, from the record,
    and the prompt equals HF's (the typed parts rendered, each <|image_pad|> repeated per row by the processor)."""
    cfg, data = configs[name, None], png(71, 45)
    template = ChatTemplate(QWEN2_VL_TEMPLATE, None, "<|im_end|>", "qwen2vl")
    assert not template.typed_content
    images = RequestImages(Vision(cfg))
    parts = [{"type": "text", "text": "Look:"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,"
                                                                                   + base64.b64encode(data).decode()}},
             {"type": "text", "text": "what is it?"}]
    text = template.render(openai_messages([{"role": "user", "content": parts}], images=images))
    image = prepare_image(data, cfg)
    ours = MARKER.sub(lambda m: image.befores[0] + image.placeholder * image.num_embeds + image.after, text)
    typed = [{"type": "text", "text": "Look:"}, {"type": "image"}, {"type": "text", "text": "what is it?"}]
    theirs = template.render([{"role": "user", "content": typed}])
    assert theirs.count("<|image_pad|>") == 1
    assert ours == theirs.replace("<|image_pad|>", "<|image_pad|>" * image.num_embeds)
    assert ours.count("<|vision_start|>") == 1 and image.num_embeds == 12


def test_qwen25_needs_its_window_pattern(tmp_path):
    """llama.cpp requires clip.vision.n_wa_pattern of a qwen2.5vl_merger file: so does hearth, at load."""
    write_settings_only(tmp_path / "q.gguf", "qwen2.5vl_merger", {"mm.2.weight": np.zeros((48, 128), np.float32)})
    with pytest.raises(ModelLoadError, match=r"mmproj has no clip.vision.n_wa_pattern"):
        read_vision_config(tmp_path / "q.gguf")


def test_an_area_bound_below_one_unit_is_refused(tmp_path):
    """smart_resize never goes below one 28 x 28 unit: a file whose image_max_pixels does is refused at load."""
    write_mmproj(tmp_path / "q.gguf", "qwen2vl_merger", tiny_hf("qwen2vl_merger"), max_pixels=700)
    with pytest.raises(ModelLoadError, match=r"image_min_pixels 6272 / image_max_pixels 700 do not hold one 28 x 28"):
        read_vision_config(tmp_path / "q.gguf")
