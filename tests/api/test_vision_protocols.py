"""Anthropic image blocks, Ollama images, Responses input_image, and the routes around a chat (/tokenize,
/apply-template, count_tokens, /props, /api/show): each image reaches the engine as rows + a MediaInput,
and each protocol's 400 has its own body shape."""

from __future__ import annotations

from tests.api.vision_fakes import (AFTER, BEFORE, PLACEHOLDER, ImageServer, b64, data_url, digest, image,
                                    vision_client)


def rows(n: int) -> str:
    return BEFORE + PLACEHOLDER * n + AFTER


def anthropic(client, content, **body):
    return client.post("/v1/messages", json={"model": "fake-model", "max_tokens": 16,
                                             "messages": [{"role": "user", "content": content}], **body})


def test_anthropic_base64_and_url_images():
    client, engine = vision_client()
    a, b = image(2, b"a"), image(3, b"b")
    with ImageServer({"b.png": b}) as site, client:
        r = anthropic(client, [{"type": "text", "text": "compare"},
                               {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(a)}},
                               {"type": "image", "source": {"type": "url", "url": site.url("b.png")}}])
        assert r.status_code == 200, r.text
        counted = client.post("/v1/messages/count_tokens", json={"model": "fake-model", "messages": [
            {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                     "data": b64(a)}}]}]})
    prompt = engine.added[-1].prompt
    # no newline beside an image, as OpenAI's parts join (HF's processors' layout: Qwen-VL's prompt ids as its own)
    assert prompt == f"<|im_start|>user\ncompare{rows(2)}{rows(3)}<|im_end|>\n<|im_start|>assistant\n"
    assert [(m.offset, m.length, m.digest) for m in engine.media[-1]] == [
        (prompt.index(PLACEHOLDER), 2, digest(a)), (prompt.rindex(PLACEHOLDER) - 2, 3, digest(b))]
    assert r.json()["usage"]["input_tokens"] == len(prompt)
    expected = len(f"<|im_start|>user\n{rows(2)}<|im_end|>\n<|im_start|>assistant\n")
    assert counted.json() == {"input_tokens": expected}  # the rows are counted


def test_anthropic_400s_are_anthropic_shaped():
    client, engine = vision_client()
    bad = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "%%%"}}
    kind = {"type": "image", "source": {"type": "base64", "media_type": "image/bmp", "data": b64(image(1))}}
    junk = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(b"junk")}}
    with client:
        for block, field, why in ((bad, "messages[0].content[0].source.data", "invalid base64"),
                                  (kind, "messages[0].content[0].source.media_type", "image/jpeg"),
                                  (junk, "messages[0].content[0].source.data", "cannot identify image file")):
            r = anthropic(client, [block])
            body = r.json()
            assert r.status_code == 400 and body["type"] == "error", body
            assert body["error"]["type"] == "invalid_request_error" and body["error"]["message"].startswith(field), body
            assert why in body["error"]["message"]
    assert not engine.added
    text_only, _ = vision_client(vision=False)
    with text_only:
        r = anthropic(text_only, [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                               "data": b64(image(1))}}])
    assert r.status_code == 400 and "--mmproj FILE" in r.json()["error"]["message"]


def test_anthropic_image_in_a_tool_result():
    client, engine = vision_client()
    messages = [{"role": "user", "content": "shoot"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "camera", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(image(2))}}]}]}]
    with client:
        r = client.post("/v1/messages", json={"model": "fake-model", "max_tokens": 8, "messages": messages,
                                              "tools": [{"name": "camera", "input_schema": {"type": "object"}}]})
    assert r.status_code == 200, r.text
    assert rows(2) in engine.added[-1].prompt and engine.media[-1][0].digest == digest(image(2))


def test_ollama_chat_images_go_ahead_of_the_text():
    client, engine = vision_client()
    a, b = image(1, b"a"), image(2, b"b")
    with client:
        r = client.post("/api/chat", json={"model": "fake-model", "stream": False, "messages": [
            {"role": "user", "content": "first", "images": [b64(a)]},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "second", "images": [b64(b)]}]})
    assert r.status_code == 200, r.text
    prompt = engine.added[-1].prompt
    assert f"user\n{rows(1)}first<|im_end|>" in prompt and f"user\n{rows(2)}second<|im_end|>" in prompt
    assert [m.digest for m in engine.media[-1]] == [digest(a), digest(b)]
    assert [prompt[m.offset:m.end] for m in engine.media[-1]] == [PLACEHOLDER, PLACEHOLDER * 2]


def test_ollama_generate_images_with_context_ahead():
    client, engine = vision_client()
    with client:
        r = client.post("/api/generate", json={"model": "fake-model", "stream": False, "prompt": "what?",
                                               "images": [b64(image(3))], "context": [65, 66]})
        raw = client.post("/api/generate", json={"model": "fake-model", "stream": False, "prompt": "[IMG] ",
                                                 "raw": True, "images": [b64(image(1))]})
    assert r.status_code == 200, r.text
    prompt, (m,) = engine.added[-2].prompt, engine.media[-2]
    assert prompt.startswith("AB<|im_start|>user\n") and f"{rows(3)}what?" in prompt
    assert (m.offset, m.length) == (prompt.index(PLACEHOLDER), 3)  # moved along by the context's two ids
    assert "context" not in r.json()  # ids with image rows continue nothing without their images
    assert raw.status_code == 200 and engine.added[-1].prompt == f"{rows(1)}[IMG] "


def test_ollama_400s_are_ollama_shaped():
    client, _ = vision_client()
    with client:
        r = client.post("/api/chat", json={"model": "fake-model", "messages": [
            {"role": "user", "content": "x", "images": ["not base64!"]}]})
        g = client.post("/api/generate", json={"model": "fake-model", "prompt": "x", "images": [b64(b"junk")]})
    assert r.status_code == 400 and r.json()["error"].startswith("messages[0].images[0]: invalid base64"), r.text
    assert g.status_code == 400 and g.json()["error"].startswith("images[0]: cannot identify image file"), g.text
    text_only, _ = vision_client(vision=False)
    with text_only:
        r = text_only.post("/api/chat", json={"model": "fake-model", "messages": [
            {"role": "user", "content": "x", "images": [b64(image(1))]}]})
    assert r.status_code == 400 and r.json()["error"].startswith("messages[0].images: images are not supported")
    assert "--mmproj FILE" in r.json()["error"]


def test_responses_input_image_and_a_follow_up_keeps_it():
    client, engine = vision_client()
    a, b = image(2, b"a"), image(1, b"b")
    with client:
        first = client.post("/v1/responses", json={"model": "fake-model", "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "see"},
                                         {"type": "input_image", "image_url": data_url(a), "detail": "auto"}]}]})
        assert first.status_code == 200, first.text
        assert [m.digest for m in engine.media[-1]] == [digest(a)]
        follow = client.post("/v1/responses", json={"model": "fake-model", "previous_response_id": first.json()["id"],
                                                    "input": [{"role": "user", "content": [
                                                        {"type": "input_image", "image_url": data_url(b)}]}]})
    assert follow.status_code == 200, follow.text
    prompt = engine.added[-1].prompt
    assert "<__hearth_image_" not in prompt and prompt.count(PLACEHOLDER) == 3
    assert [(m.digest, prompt[m.offset:m.end]) for m in engine.media[-1]] == [(digest(a), PLACEHOLDER * 2),
                                                                           (digest(b), PLACEHOLDER)]


def test_responses_file_id_is_refused_clearly():
    client, _ = vision_client()
    with client:
        r = client.post("/v1/responses", json={"model": "fake-model", "input": [
            {"role": "user", "content": [{"type": "input_image", "file_id": "file-123"}]}]})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "input[0].content[0].file_id" and "keeps no files" in r.json()["error"]["message"]


def test_tokenize_counts_the_rows_and_apply_template_shows_the_media_marker():
    client, _ = vision_client()
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi"},
                                             {"type": "image_url", "image_url": {"url": data_url(image(4))}}]}]
    with client:
        tok = client.post("/tokenize", json={"model": "fake-model", "messages": messages})
        shown = client.post("/apply-template", json={"model": "fake-model", "messages": messages})
    prompt = f"<|im_start|>user\nhi{rows(4)}<|im_end|>\n<|im_start|>assistant\n"
    assert tok.status_code == 200 and tok.json()["tokens"] == [ord(c) for c in prompt], tok.text
    assert shown.json()["prompt"] == "<|im_start|>user\nhi<__media__><|im_end|>\n<|im_start|>assistant\n"


def test_completion_refuses_multimodal_data():
    client, _ = vision_client()
    with client:
        r = client.post("/completion", json={"prompt": "<__media__> hi", "multimodal_data": [b64(image(1))]})
        nested = client.post("/completion", json={"prompt": {"prompt_string": "<__media__> hi",
                                                             "multimodal_data": [b64(image(1))]}})
    assert r.status_code == 400 and "multimodal_data" in r.text
    assert nested.status_code == 400 and "{prompt_string, multimodal_data} prompt" in nested.text, nested.text


def test_props_and_show_say_vision():
    client, _ = vision_client()
    text_only, _ = vision_client(vision=False)
    with client, text_only:
        assert client.get("/props").json()["modalities"] == {"vision": True, "audio": False}
        assert text_only.get("/props").json()["modalities"]["vision"] is False
        assert "vision" in client.post("/api/show", json={"model": "fake-model"}).json()["capabilities"]
        assert "vision" not in text_only.post("/api/show", json={"model": "fake-model"}).json()["capabilities"]
