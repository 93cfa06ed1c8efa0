"""hearth.api.media_prompt: a rendered prompt split at its image markers (BOS once, each image's
before/rows/after, the placeholder's id), PromptIds through the ways routes extend prompts, and a tool
guard's retries and re-prompts keeping the request's images."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from hearth.api.errors import APIError
from hearth.api.media_parts import RequestImages, Vision
from hearth.api.media_prompt import PromptIds, encode_with_images, shifted, shown
from hearth.api.served import ServedModel
from hearth.media.inputs import MediaInput
from tests.api.vision_fakes import AFTER, BEFORE, PLACEHOLDER, ImageServer, data_url, fake_prepare, image, vision_client
from tests.server.fakes import FakeTokenizer

BOS = "\x02"


class BosTokenizer(FakeTokenizer):
    """Adds BOS (id 2) when asked to add special tokens, as a llama tokenizer does."""
    bos_token, add_bos = BOS, True

    def encode(self, text, add_special_tokens=True, parse_special=False):
        return ([2] if add_special_tokens else []) + super().encode(text)


def served_with(tokenizer, vision) -> ServedModel:
    return ServedModel(["m"], tokenizer, None, None, 4096, vision=vision)


def loaded(vision, *datas: bytes) -> tuple[RequestImages, list[str]]:
    images = RequestImages(vision)
    marks = [images.add_url(f"messages[0].content[{j}]", data_url(d)) for j, d in enumerate(datas)]
    asyncio.run(images.load())
    return images, marks


def test_bos_once_rows_in_place_and_text_around_them():
    vision = Vision(None, fake_prepare)
    images, (a, b) = loaded(vision, image(2), image(3, b"bi"))
    served = served_with(BosTokenizer(), vision)
    text = f"{BOS}hi {a} and {b}."  # the template wrote BOS: it is not doubled
    ids = encode_with_images(served, text, images, [{"content": f"hi {a} and {b}."}])
    assert "".join(map(chr, ids)) == f"{BOS}hi {BEFORE}{PLACEHOLDER * 2}{AFTER} and {BEFORE}{PLACEHOLDER * 3}{AFTER}."
    first, second = ids.media
    assert (first.offset, first.length, first.bidirectional) == (4 + len(BEFORE), 2, False)
    assert second.length == 3 and second.bidirectional and ids[second.offset:second.end] == [1, 1, 1]


def test_an_images_grid_reaches_its_media_input_and_moves_with_it():
    """PreparedImage.grid (M-RoPE's rows x cols) into the MediaInput, and along Ollama's `context` (shifted)."""
    vision = Vision(None, fake_prepare)
    images, (a, b) = loaded(vision, image(2, b"grid"), image(3))
    ids = encode_with_images(served_with(BosTokenizer(), vision), f"{a} {b}", images, [{"content": f"{a} {b}"}])
    assert [m.grid for m in ids.media] == [(1, 2), None]
    assert [m.grid for m in shifted([5, 5], ids).media] == [(1, 2), None]


def test_an_image_first_and_last_and_a_placeholder_of_no_single_token():
    vision = Vision(None, lambda d: SimpleNamespace(**{**vars(fake_prepare(d)), "placeholder": "<two>"}))
    images, (a,) = loaded(vision, image(2))
    ids = encode_with_images(served_with(BosTokenizer(), vision), a, images, [{"content": a}])
    assert ids[0] == 2 and ids.count(0) == 2  # BOS, then the rows as id 0: "<two>" is no single token
    assert "".join(map(chr, ids[ids.media[0].end:])) == AFTER


def test_another_models_served_cannot_take_the_images():
    images, (a,) = loaded(Vision(None, fake_prepare), image(1))
    with pytest.raises(APIError) as e:
        encode_with_images(served_with(FakeTokenizer(), Vision(None, fake_prepare)), a, images, [{"content": a}])
    assert e.value.param == "messages[0].content[0]" and "not supported by model 'm'" in e.value.message


def test_prompt_ids_keep_their_media_when_extended_and_moved():
    m = MediaInput(3, 2, b"d", None)
    ids = PromptIds([9, 9, 9, 1, 1, 9], [m])
    assert (ids + [7]).media == (m,) and list(ids + [7]) == [9, 9, 9, 1, 1, 9, 7]
    moved = shifted([5, 5], ids)
    assert moved.media[0].offset == 5 and moved[moved.media[0].offset] == 1
    assert moved.media[0] == MediaInput(5, 2, b"d", None)  # every other field as it was
    assert shifted([5], [1, 2]) == [5, 1, 2] and not hasattr(shifted([5], [1, 2]), "media")


def test_shown_replaces_only_this_requests_markers():
    images, (a,) = loaded(Vision(None, fake_prepare), image(1))
    other = "<__hearth_image_ffffffffffffffff_0__>"
    assert shown(f"x{a}y{other}", images) == f"x<__media__>y{other}"


def test_a_redirect_to_another_scheme_is_not_followed():
    """urllib itself follows one to ftp."""
    client, _ = vision_client()
    with ImageServer({"moved": ("ftp://127.0.0.1:1/a.png",)}) as site, client:
        r = client.post("/v1/chat/completions", json={"model": "fake-model", "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": site.url("moved")}}]}]})
    assert r.status_code == 400 and "not http(s)" in r.json()["error"]["message"], r.text


def test_the_tool_guards_resample_and_reprompt_keep_the_image():
    from tests.server.test_tool_guard import LOOSE
    client, engine = vision_client()
    content = [{"type": "image_url", "image_url": {"url": data_url(image(3))}}, {"type": "text", "text": "script:guard_bad_args"}]
    with client:
        r = client.post("/v1/chat/completions", json={"model": "fake-model", "tools": [LOOSE],
                                                      "messages": [{"role": "user", "content": content}]})
    assert r.status_code == 200, r.text
    assert [e["kind"] for e in r.json()["hearth"]["retries"]] == ["resample", "reprompt"]
    assert len(engine.added) == len(engine.media) == 3
    for added, media in zip(engine.added, engine.media):
        (m,) = media
        assert added.prompt[m.offset - len(BEFORE):m.end + len(AFTER)] == BEFORE + PLACEHOLDER * 3 + AFTER


def test_compaction_may_drop_an_old_image_but_a_template_may_not():
    """The image of a turn compaction dropped is no template's doing: no 400, no MediaInput for it."""
    old = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(image(9, bytes([65 + i])))}},
                                        {"type": "text", "text": f"step {i} " + "x" * 300}]} for i in range(3)]
    chat = [{"role": "user", "content": "Look at these."}]
    for msg in old:
        chat += [{"role": "assistant", "content": "ok"}, msg]
    chat += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": data_url(image(2, b"last"))}}, {"type": "text", "text": "and this?"}]}]
    client, engine = vision_client(max_model_len=600)
    with client:
        r = client.post("/v1/chat/completions", json={"model": "fake-model", "messages": chat, "max_tokens": 20,
                                                      "hearth": {"compaction": {"mode": "tiered", "keep_last": 1}}})
    assert r.status_code == 200, r.text
    assert r.json()["hearth"]["events"][0]["kind"] == "compacted"
    prompt, media = engine.added[-1].prompt, engine.media[-1]
    assert "step 0" not in prompt and media and media[-1].length == 2 and len(media) < 4
    for m in media:
        assert prompt[m.offset:m.end] == PLACEHOLDER * m.length


TILES = ("<start_of_image>", "<start_of_image>", "\n<start_of_image>", "<start_of_image>", "\n\n<start_of_image>")
"""An image in 2 x 2 tiles and a global image, laid out as idefics3's (its tokens are not in gemma3's vocab)."""


@pytest.mark.parametrize("befores", [("\n\n<start_of_image>",), TILES], ids=["one-piece", "tiles"])
def test_pieces_tokenized_apart_equal_the_expanded_prompt_tokenized_whole(model_path, befores):
    """Gemma3's real tokenizer and template: the text before an image with its first piece's `before`, each
    further piece's, and its `after` with the text after, tokenized apart = the prompt with the rows spelled
    out as a special token, tokenized whole (HF's processor expands the image that way): the rows' special
    ids cut the text the same way."""
    from hearth.api.chat_template import ChatTemplate
    from hearth.api.messages import openai_messages
    from hearth.loader.gguf_loader import GGUFFile
    from hearth.loader.tokenizer import Tokenizer

    tok = Tokenizer.from_gguf(GGUFFile(model_path("gemma3-270m")))
    after, n = "<end_of_image>\n\n", len(befores)
    vision = Vision(None, lambda d: SimpleNamespace(**{**vars(fake_prepare(d)), "befores": befores, "after": after,
                                                       "placeholder": "<pad>", "pixels": (d,) * n,
                                                       "digests": tuple(bytes([k]) * 32 for k in range(n))}))
    served = ServedModel(["g"], tok, ChatTemplate(tok.chat_template, "<bos>", "<end_of_turn>", "gemma3"), None,
                         4096, vision=vision)
    images = RequestImages(vision)
    msgs = openai_messages([{"role": "user", "content": [
        {"type": "text", "text": "Describe"}, {"type": "image_url", "image_url": data_url(image(5))},
        {"type": "text", "text": "please."}]}], images=images)
    asyncio.run(images.load())
    text = served.render_chat(msgs)
    ids = served.encode_chat_text(text, images, msgs)
    spelled = "".join(b + "<pad>" * 5 for b in befores) + after
    whole = served.encode_chat_text(text.replace(images.marker(0), spelled))
    assert list(ids) == whole and ids.count(tok.bos_id) == 1
    start = tok.encode("<start_of_image>", add_special_tokens=False)[0]
    assert [m.digest for m in ids.media] == [bytes([k]) * 32 for k in range(n)]
    for m in ids.media:
        assert m.length == 5 and ids[m.offset - 1] == start and ids[m.end] != 0


def test_a_router_whose_small_model_reads_text_only_leaves_an_image_to_the_main_model():
    from hearth.api.app import ServerConfig, create_app
    from hearth.api.model_pool import ModelPool
    from hearth.tool_guard.routing import RouterConfig
    from starlette.testclient import TestClient
    from tests.api.vision_fakes import MediaEngine
    from tests.server.fakes import fake_served
    from tests.server.test_tool_router import TOOLS

    main, small = MediaEngine(), MediaEngine()
    served = fake_served(engine=main, names=("main",))
    served.vision = Vision(None, fake_prepare)
    pool = ModelPool.of([served, fake_served(engine=small, names=("small",))], {"main": RouterConfig("small", 0.5, 0.0)})
    content = [{"type": "image_url", "image_url": {"url": data_url(image(2))}}, {"type": "text", "text": "weather?"}]
    with TestClient(create_app(pool, ServerConfig()), raise_server_exceptions=False) as client:
        r = client.post("/v1/chat/completions", json={"model": "main", "tools": TOOLS,
                                                      "messages": [{"role": "user", "content": content}]})
    assert r.status_code == 200, r.text
    router = r.json()["hearth"]["router"]
    assert router["decision"] == "fallback" and "not supported by model 'small'" in router["reason"]
    assert small.added == [] and [m.length for m in main.media[-1]] == [2]
