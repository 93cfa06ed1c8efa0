"""--mmproj end to end: LLM(mmproj=), LLM.chat with image parts, `hearth serve --mmproj` and `hearth run
--image`, on a tiny gemma3 LM with a tiny Gemma 3 vision projector as wide as it (its rows bidirectional)."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image
from starlette.testclient import TestClient

from hearth import LLM, SamplingParams
from hearth.api.app import create_app
from hearth.cli import command_parser, main
from hearth.commands.serve import server_config
from hearth.commands.serve_models import build_pool
from hearth.errors import HearthError
from hearth.llm_vision import tokens_prompt
from hearth.media.config import read_vision_config
from tests import mmproj_factory
from tests.bert_factory import write_tiny_encoder

GREEDY = SamplingParams(temperature=0, max_tokens=4, logprobs=3)


def png(color: tuple[int, int, int], size=(40, 24)) -> bytes:
    out = io.BytesIO()
    img = Image.new("RGB", size, color)
    img.putpixel((3, 5), (255 - color[0], 7, 200))  # not one flat color: the tower's rows differ by place
    img.save(out, "PNG")
    return out.getvalue()


def url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


def asking(data: bytes, text: str = "what is it?") -> list[dict]:
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url(data)}},
                                         {"type": "text", "text": text}]}]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("vision")
    model, mmproj, dims = mmproj_factory.tiny_vision_model(d)
    mmproj_factory.write_mmproj(d / "other.gguf", "gemma3", mmproj_factory.tiny_hf("gemma3", lm_hidden=dims.hidden + 16))
    return model, mmproj, d / "other.gguf"


@pytest.fixture(scope="module")
def llm(files):
    model, mmproj, _ = files
    return LLM(str(model), mmproj=str(mmproj), max_model_len=256, progress=False)


def test_an_image_is_read_where_the_message_puts_it(llm):
    ids = llm.encode_chat(asking(png((200, 30, 30))))
    (span,) = ids.media
    assert span.length == llm.vision_config.num_embeds and span.bidirectional
    red = llm.chat(asking(png((200, 30, 30))), GREEDY)[0].outputs[0]
    again = llm.generate(tokens_prompt(ids), GREEDY)[0].outputs[0]
    assert again.token_ids == red.token_ids  # its blocks from the prefix cache: their rows' bits may differ
    assert again.logprobs[0] == pytest.approx(red.logprobs[0], abs=1e-4)
    blue = llm.chat(asking(png((20, 30, 220))), GREEDY)[0].outputs[0]
    assert blue.logprobs[0] != pytest.approx(red.logprobs[0], abs=1e-2)  # the rows are the image's


def test_the_same_image_again_is_a_prefix_cache_hit(llm):
    messages = asking(png((10, 160, 40)), "and this one?")
    (span,) = llm.encode_chat(messages).media
    bs = llm.config.block_size
    first = llm.chat(messages, GREEDY)[0]
    second = llm.chat(messages, GREEDY)[0]
    assert first.num_cached_tokens <= span.offset  # a new image: no block holding its rows is found
    assert second.num_cached_tokens >= span.end // bs * bs > span.offset
    assert second.outputs[0].token_ids == first.outputs[0].token_ids


def test_another_mmprojs_weights_never_read_the_disk_tiers_image_blocks(files, tmp_path):
    """The disk tier outlives the process: restarted with an mmproj of the same config and other weights
    (another seed: as Q8_0 for F16, or a fine-tune), the image's blocks are not found; with the first
    file again they are."""
    model, mmproj, _ = files
    mmproj_factory.write_mmproj(tmp_path / "tuned.gguf", "gemma3",
                                mmproj_factory.tiny_hf("gemma3", seed=7, lm_hidden=read_vision_config(mmproj).lm_hidden))
    messages = asking(png((90, 90, 30)), "on disk?")
    cached = []
    for path in (mmproj, tmp_path / "tuned.gguf", mmproj):
        run = LLM(str(model), mmproj=str(path), max_model_len=256, progress=False,
                  kv_disk_dir=str(tmp_path / "kv"), kv_disk_space_mb=16)
        (span,) = run.encode_chat(messages).media
        out = run.chat(messages, GREEDY)[0]
        cached.append(out.num_cached_tokens)
        bs = run.config.block_size
        run.close()
    assert cached[1] <= span.offset  # the text before the image only
    assert cached[2] >= span.end // bs * bs > span.offset


def test_bad_mmproj_and_image_input_are_one_line(files, llm):
    model, _, other = files
    with pytest.raises(HearthError, match="--mmproj nowhere.gguf: no such file"):
        LLM(str(model), mmproj="nowhere.gguf", progress=False)
    with pytest.raises(HearthError, match="pass the mmproj made for this model"):
        LLM(str(model), mmproj=str(other), max_model_len=256, progress=False)
    write_tiny_encoder(model.parent / "encoder.gguf", "bert")
    with pytest.raises(HearthError, match="--mmproj: an embedding model takes no images"):
        LLM(str(model.parent / "encoder.gguf"), mmproj=str(other), progress=False)
    with pytest.raises(ValueError, match=r"messages\[0\].content\[0\].image_url"):
        llm.chat(asking(b"not an image"), GREEDY)
    text_only = LLM(str(model), max_model_len=256, progress=False)
    with pytest.raises(ValueError, match="--mmproj"):
        text_only.chat(asking(png((1, 2, 3))), GREEDY)


def test_serve_with_mmproj_answers_as_the_library(files, llm):
    model, mmproj, _ = files
    args = command_parser("serve").parse_intermixed_args([str(model), "--mmproj", str(mmproj), "--max-model-len", "256"])
    messages = asking(png((90, 90, 10)))
    want = llm.chat(messages, SamplingParams(temperature=0, max_tokens=4))[0].outputs[0].text
    with TestClient(create_app(build_pool(args), server_config(args))) as c:
        r = c.post("/v1/chat/completions", json={"messages": messages, "temperature": 0, "max_tokens": 4})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == want
        assert r.json()["usage"]["prompt_tokens"] == len(llm.encode_chat(messages))
        assert c.get("/props").json()["modalities"]["vision"] is True


def test_run_with_an_image(files, llm, tmp_path, capsys):
    model, mmproj, _ = files
    image = tmp_path / "a.png"
    image.write_bytes(png((5, 99, 180)))
    want = llm.chat(asking(image.read_bytes(), "hi"), SamplingParams(temperature=0, max_tokens=4))[0].outputs[0].text
    argv = ["run", str(model), "hi", "--temperature", "0", "-n", "4", "--ctx", "256"]
    assert main([*argv, "--mmproj", str(mmproj), "--image", str(image)]) == 0
    assert capsys.readouterr().out == want + "\n"
    for more, needle in ((["--image", str(image)], "--image needs the model's vision projector: add --mmproj FILE"),
                         (["--mmproj", str(mmproj), "--image", str(tmp_path / "none.png")], "none.png: No such file")):
        assert main([*argv, *more]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], err
