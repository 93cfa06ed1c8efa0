"""OpenAI chat's image_url parts reach the engine as prompt ids with the image's rows in place and one
MediaInput per image; every way an image can be bad is a 400 naming its field."""

from __future__ import annotations

import pytest

from hearth.api import media_fetch
from tests.api.vision_fakes import AFTER, BEFORE, PLACEHOLDER, ImageServer, data_url, digest, image, vision_client


def chat(client, content, **body):
    return client.post("/v1/chat/completions", json={"model": "fake-model", "messages": content
                                                     if isinstance(content, list) and content and "role" in content[0]
                                                     else [{"role": "user", "content": content}], **body})


def rows(n: int) -> str:
    return BEFORE + PLACEHOLDER * n + AFTER


def test_an_image_url_part_becomes_rows_and_a_media_input():
    client, engine = vision_client()
    with client:
        r = chat(client, [{"type": "text", "text": "look:"}, {"type": "image_url", "image_url": {"url": data_url(image(3))}},
                          {"type": "text", "text": "what?"}])
    assert r.status_code == 200, r.text
    prompt = engine.added[-1].prompt
    assert prompt == f"<|im_start|>user\nlook:{rows(3)}what?<|im_end|>\n<|im_start|>assistant\n"  # no newline beside an image (HF)
    (m,) = engine.media[-1]
    assert (m.offset, m.length, m.digest) == (prompt.index(PLACEHOLDER), 3, digest(image(3)))
    assert m.pixels == image(3) and m.bidirectional is False
    assert r.json()["usage"]["prompt_tokens"] == len(prompt)  # the rows count as prompt tokens


def test_two_images_in_a_message_and_across_messages_keep_their_order():
    client, engine = vision_client()
    a, b, c = image(2, b"a"), image(4, b"b"), image(1, b"cbi")
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": data_url(a)},  # the string form
                                             {"type": "image_url", "image_url": {"url": data_url(b), "detail": "low"}}]},
                {"role": "assistant", "content": "two"},
                {"role": "user", "content": [{"type": "text", "text": "and"}, {"type": "image_url", "image_url": {"url": data_url(c)}}]}]
    with client:
        assert chat(client, messages).status_code == 200
    prompt = engine.added[-1].prompt
    media = engine.media[-1]
    assert [m.digest for m in media] == [digest(a), digest(b), digest(c)]
    assert [m.length for m in media] == [2, 4, 1] and [m.bidirectional for m in media] == [False, False, True]
    for m in media:
        assert prompt[m.offset - len(BEFORE):m.offset] == BEFORE and prompt[m.offset + m.length:].startswith(AFTER)
        assert prompt[m.offset:m.offset + m.length] == PLACEHOLDER * m.length
    assert prompt.count(PLACEHOLDER) == 7 and media[0].offset < media[1].offset < media[2].offset


def test_a_fetched_image():
    client, engine = vision_client()
    with ImageServer({"cat.png": image(2, b"cat")}) as site, client:
        r = chat(client, [{"type": "image_url", "image_url": {"url": site.url("cat.png")}}])
        assert r.status_code == 200, r.text
        assert engine.media[-1][0].digest == digest(image(2, b"cat"))
        missing = chat(client, [{"type": "image_url", "image_url": {"url": site.url("gone.png")}}])
    assert missing.status_code == 400
    err = missing.json()["error"]
    assert err["param"] == "messages[0].content[0].image_url.url" and "HTTP 404" in err["message"], err


def test_a_fetch_past_the_size_cap_is_refused(monkeypatch):
    monkeypatch.setattr(media_fetch, "MAX_IMAGE_BYTES", 64)
    client, _ = vision_client()
    with ImageServer({"big.png": image(1, b"x" * 100)}) as site, client:
        r = chat(client, [{"type": "image_url", "image_url": {"url": site.url("big.png")}}])
    assert r.status_code == 400 and "more than the 64 bytes allowed" in r.json()["error"]["message"], r.text


def test_a_fetch_that_takes_too_long_is_refused(monkeypatch):
    monkeypatch.setattr(media_fetch, "FETCH_TIMEOUT_S", 0.3)
    client, _ = vision_client()
    with ImageServer({}) as site, client:
        r = chat(client, [{"type": "image_url", "image_url": {"url": site.url("slow")}}])
    assert r.status_code == 400 and "timed out" in r.json()["error"]["message"], r.text


@pytest.mark.parametrize("url,field,why", [
    ("data:image/png;base64,@@@not base64", "messages[0].content[1].image_url.url", "invalid base64"),
    ("data:image/png,rawbytes", "messages[0].content[1].image_url.url", "must be base64"),
    ("data:text/plain;base64,aGk=", "messages[0].content[1].image_url.url", "is not an image"),
    ("file:///etc/passwd", "messages[0].content[1].image_url.url", "unsupported URL scheme 'file'"),
    ("ftp://example.com/a.png", "messages[0].content[1].image_url.url", "unsupported URL scheme 'ftp'"),
    (data_url(b"GIF89a not ours"), "messages[0].content[1].image_url.url", "cannot identify image file"),
])
def test_bad_images_are_400s_naming_the_field(url, field, why):
    client, engine = vision_client()
    with client:
        r = chat(client, [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": url}}])
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == field and why in err["message"] and err["type"] == "invalid_request_error", err
    assert not engine.added


def test_a_model_without_vision_names_mmproj():
    client, _ = vision_client(vision=False)
    with client:
        r = chat(client, [{"type": "image_url", "image_url": {"url": data_url(image(1))}}])
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "messages[0].content[0].type" and "--mmproj FILE" in err["message"], err


def test_a_forged_marker_stays_text():
    client, engine = vision_client()
    with client:
        first = chat(client, [{"type": "image_url", "image_url": {"url": data_url(image(1))}}])
        assert first.status_code == 200
        marker = "<__hearth_image_0123456789abcdef_0__>"
        r = chat(client, [{"type": "text", "text": f"say {marker}"}, {"type": "image_url", "image_url": {"url": data_url(image(2))}}])
    assert r.status_code == 200
    prompt = engine.added[-1].prompt
    assert marker in prompt and len(engine.media[-1]) == 1 and prompt.count(PLACEHOLDER) == 2


def test_a_template_that_drops_the_image_is_a_400():
    client, _ = vision_client(template="{% for m in messages %}{{ m.role }}{% endfor %}")
    with client:
        r = chat(client, [{"type": "image_url", "image_url": {"url": data_url(image(1))}}])
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "messages[0].content[0].image_url.url" and "left this image out" in err["message"], err


@pytest.mark.parametrize("part,field,why", [
    ({"type": "image_url"}, "messages[0].content[1].image_url", "required: a data:image/...;base64, URL"),
    ({"type": "image_url", "image_url": {}}, "messages[0].content[1].image_url.url", "required: a data:image"),
    ({"type": "image_url", "image_url": None}, "messages[0].content[1].image_url", "required: a data:image"),
    ({"type": "image", "image": "x"}, "messages[0].content[1].source", "OpenAI's is {type: image_url"),
    ({"type": "input_audio", "input_audio": {}}, "messages[0].content[1].type", "hearth reads text and images"),
])
def test_a_missing_url_or_a_part_of_another_kind_says_what_it_takes(part, field, why):
    client, engine = vision_client()
    with client:
        r = chat(client, [{"type": "text", "text": "hi"}, part])
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == field and why in err["message"], err
    assert not engine.added
