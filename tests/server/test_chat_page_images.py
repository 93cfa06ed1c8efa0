"""Images in the chat page (headless Chromium, as tests/server/test_chat_page.py): a model served with
--mmproj (a tiny gemma3 LM and a tiny Gemma 3 projector as wide as it, as tests/test_llm_vision.py) gets an
attach button; images come from the file picker or a paste, show as thumbnails, go as OpenAI image_url parts
ahead of the text, and stay with the conversation in the browser's storage (their data dropped, with a
placeholder and a notice, when the storage is full). A model that reads text only gets no button, and an
image pasted or dropped on its page is refused with a notice."""

from __future__ import annotations

import base64
import io
import json
import os

import pytest
from PIL import Image

from tests import mmproj_factory
from tests.server.chat_browser import CHROMIUM, DRIVER, PageServer, chromium, fresh
from tests.server.conftest import API_KEY

pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="chromium and chromedriver are not installed "
                                "(apt-get install chromium chromium-driver; `make test` does it)")

# the request bodies the page sends to /v1/chat/completions, and the /props it asked, recorded in the page
# (from its start: the browser runs this ahead of the page's scripts)
RECORD_FETCH = """
window.__bodies = []; window.__props = [];
const original = window.fetch;
window.fetch = (url, options) => {
  if (String(url).includes('/chat/completions')) window.__bodies.push(JSON.parse(options.body));
  const answer = original(url, options);
  if (String(url).startsWith('props')) answer.then(() => window.__props.push(String(url)));
  return answer;
};
"""
# a paste of `files` ([name, type, base64]) into the message box, or a drop of them on the page; -> whether
# the page took the event (its default, such as opening a dropped file in the tab, prevented)
GIVE_FILES = """
const [how, files] = arguments;
const transfer = new DataTransfer();
for (const [name, type, b64] of files) {
  transfer.items.add(new File([Uint8Array.from(atob(b64), (c) => c.charCodeAt(0))], name, {type}));
}
const event = how === 'paste' ? new ClipboardEvent('paste', {clipboardData: transfer, bubbles: true, cancelable: true})
  : new DragEvent('drop', {dataTransfer: transfer, bubbles: true, cancelable: true});
return !(how === 'paste' ? document.getElementById('input') : document.body).dispatchEvent(event);
"""


def image(kind: str, size=(40, 24)) -> bytes:
    """Noise: an image whose data URL is as long as its pixels (a storage it fills, freed when dropped)."""
    out = io.BytesIO()
    Image.frombytes("RGB", size, os.urandom(size[0] * size[1] * 3)).save(out, kind)
    return out.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = chromium(tmp_path_factory.mktemp("chromium"))
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORD_FETCH})
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def vision_server(tmp_path_factory):
    """`hearth serve MODEL --mmproj FILE` on the tiny gemma3, in this process."""
    from hearth.api.app import create_app
    from hearth.cli import command_parser
    from hearth.commands.serve import server_config
    from hearth.commands.serve_models import build_pool

    d = tmp_path_factory.mktemp("vision")
    model, mmproj, _ = mmproj_factory.tiny_vision_model(d)
    args = command_parser("serve").parse_intermixed_args([str(model), "--mmproj", str(mmproj), "--max-model-len", "256"])
    with PageServer(create_app(build_pool(args), server_config(args))) as server:
        yield server


@pytest.fixture(scope="module")
def text_server():
    with PageServer() as server:
        yield server


def test_images_in_the_chat_page(browser, vision_server, tmp_path):
    page = fresh(browser, vision_server.url)
    page.wait(lambda: page.find("#attach").is_displayed(), "the attach button")
    assert page.find("#attach").get_attribute("aria-label") == "Attach images"
    page.find("#settings-toggle").click()
    page.find("#temperature").send_keys("0")
    page.find("#max-tokens").send_keys("4")
    page.find("#settings-toggle").click()

    # one image from the file picker (hidden behind the button: shown for selenium to type its path)
    png = tmp_path / "red.png"
    png.write_bytes(image("PNG", (96, 64)))
    browser.execute_script("document.getElementById('image-files').hidden = false")
    page.find("#image-files").send_keys(str(png))
    browser.execute_script("document.getElementById('image-files').hidden = true")
    jpeg, gif = image("JPEG"), image("GIF")
    # one pasted (a screenshot's paste: an image and no text), one dropped on the page and removed again; a
    # file that is no image refused
    assert browser.execute_script(GIVE_FILES, "paste", [["blue.jpg", "image/jpeg", b64(jpeg)]])
    page.wait(lambda: len(page.all("#attachments .thumb img")) == 2, "two thumbnails")
    assert browser.execute_script(GIVE_FILES, "drop", [["green.gif", "image/gif", b64(gif)]])
    page.wait(lambda: len(page.all("#attachments .thumb img")) == 3, "three thumbnails")
    browser.execute_script(GIVE_FILES, "paste", [["notes.txt", "text/plain", b64(b"hello")]])
    page.wait(lambda: page.find("#notice").text == "Images: not attached: notes.txt (not PNG, JPEG, GIF or WEBP).",
              "the refusal")
    remove = page.all("#attachments .remove")[2]
    assert remove.get_attribute("aria-label") == "Remove green.gif"
    remove.click()
    assert [i.get_attribute("alt") for i in page.all("#attachments .thumb img")] == ["red.png", "blue.jpg"]
    _screenshot(page, tmp_path / "chat_page_attached.png")

    answer = page.send("what is it?")  # the tiny model read the images (a part it could not read is a 400)
    body = page.d.execute_script("return window.__bodies.at(-1)")
    want = [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + b64(png.read_bytes())}},
            {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + b64(jpeg)}},
            {"type": "text", "text": "what is it?"}]
    assert body["messages"] == [{"role": "user", "content": want}]
    assert not page.find("#attachments").is_displayed() and page.find("#input").get_attribute("value") == ""
    assert not page.find("#notice").is_displayed()  # the refusal above is settled
    # the answer is the server's to the same request
    import httpx2

    plain = {k: v for k, v in body.items() if k != "stream_options"} | {"stream": False}
    direct = httpx2.post(vision_server.url + "/v1/chat/completions", json=plain, timeout=120).json()
    stored = json.loads(page.d.execute_script("return localStorage.getItem('hearth-chats-v1')"))[0]
    assert stored["messages"][1]["content"] == direct["choices"][0]["message"]["content"] and answer.text
    # the message shows its images, and keeps them over a reload
    thumbs = lambda: [(i.get_attribute("alt"), i.get_attribute("src")[:22]) for i in page.all(".msg.user .thumb img")]
    assert thumbs() == [("red.png", "data:image/png;base64,"), ("blue.jpg", "data:image/jpeg;base64")]
    _screenshot(page, tmp_path / "chat_page_images.png")
    page.d.refresh()
    page.wait(lambda: len(thumbs()) == 2, "the thumbnails after a reload")
    assert stored["messages"][0]["images"][0]["url"] == want[0]["image_url"]["url"]
    _storage_full(page, want, tmp_path)


def _screenshot(page, path):
    assert page.d.save_screenshot(str(path))
    print(f"\nchat page screenshot: {path}")


def _storage_full(page, want, tmp_path):
    """The storage full: the conversation is saved without its images' data, the page says so, and a
    placeholder shows where each was after a reload; the request still had them."""
    page.d.execute_script("""
        let lo = 0, hi = 16 * 2 ** 20;  // leave under 16 characters free
        while (hi - lo > 16) {
          const mid = (lo + hi) >> 1;
          try { localStorage.setItem('filler', 'x'.repeat(mid)); lo = mid; } catch { hi = mid; }
        }
        localStorage.setItem('filler', 'x'.repeat(lo));""")
    try:
        page.send("and now?")
        assert page.d.execute_script("return window.__bodies.at(-1).messages[0].content") == want
        page.wait(lambda: "storage is full: the images of 1 conversation were not saved" in page.find("#notice").text,
                  "the notice")
        stored = json.loads(page.d.execute_script("return localStorage.getItem('hearth-chats-v1')"))[0]
        assert stored["messages"][0]["images"] == [{"name": "red.png", "type": "image/png", "dropped": True},
                                                   {"name": "blue.jpg", "type": "image/jpeg", "dropped": True}]
        assert len(page.all(".msg.user .thumb img")) == 2  # this page keeps them
        page.d.refresh()
        page.wait(lambda: len(page.all(".msg.user .thumb.dropped")) == 2, "the placeholders")
        assert page.find(".thumb.dropped").text == "image not kept: the browser's storage was full"
        assert page.all(".msg.user .bubble")[0].text == "what is it?"
        _screenshot(page, tmp_path / "chat_page_dropped.png")
    finally:
        page.d.execute_script("localStorage.removeItem('filler')")


def test_a_text_model_takes_no_image(browser, text_server):
    page = fresh(browser, text_server.url)
    page.find("#key").send_keys(API_KEY + "\t")
    page.wait(lambda: page.d.execute_script("return window.__props.length"), "the page to ask /props")
    assert not page.find("#attach").is_displayed()
    page.find("#input").send_keys("hi")
    png = ["red.png", "image/png", b64(image("PNG"))]
    for how in ("paste", "drop"):  # refused, and a drop does not open the file in the tab (leaving the page)
        assert browser.execute_script(GIVE_FILES, how, [png]) is True
        page.wait(lambda: page.find("#notice").text == "Images: fake-model reads text only; it cannot be sent any.",
                  "the notice")
        assert not page.find("#attachments").is_displayed() and page.find("#input").get_attribute("value") == "hi"
        browser.execute_script("document.getElementById('notice').textContent = ''")


def test_request_body_and_store_with_images(browser, text_server):
    """requestBody: images then text, an image alone without a text part, a dropped image left out; Store: when
    the whole does not fit, the oldest conversations' images go first."""
    browser.get(text_server.url + "/")
    got = browser.execute_async_script("""
        const done = arguments[0];
        Promise.all([import('/static/stream.js'), import('/static/store.js')]).then(([stream, {Store}]) => {
          const image = (name) => ({name, type: 'image/png', url: 'data:image/png;base64,' + 'A'.repeat(1000)});
          const chat = {settings: {system: '', tools: ''}, messages: [
            {role: 'user', content: 'both', images: [image('a')]}, {role: 'user', content: '', images: [image('b')]},
            {role: 'user', content: 'gone', images: [{name: 'c', type: 'image/png', dropped: true}]}]};
          const kept = {};  // a storage of 2000 characters
          const storage = {getItem: (k) => kept[k] ?? null, setItem: (k, v) => {
            if (v.length > 2000) throw new DOMException('full', 'QuotaExceededError');
            kept[k] = v; }};
          const store = new Store(storage);
          const old = store.create('m'), recent = store.create('m');
          old.messages.push({role: 'user', content: 'x', images: [image('o')]});
          store.save(old);
          recent.messages.push({role: 'user', content: 'y', images: [image('r')]});
          recent.updated = old.updated + 1;
          store.save();
          const saved = JSON.parse(kept['hearth-chats-v1']);
          done({body: stream.requestBody(chat, 'm').messages.map((m) => m.content), error: store.error,
                saved: saved.map((c) => c.messages[0].images[0])});
        });""")
    url = "data:image/png;base64," + "A" * 1000
    assert got["body"] == [[{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "both"}],
                           [{"type": "image_url", "image_url": {"url": url}}], "gone"]
    assert got["saved"] == [{"name": "o", "type": "image/png", "dropped": True}, {"name": "r", "type": "image/png", "url": url}]
    assert got["error"].startswith("The browser's storage is full: the images of 1 conversation were not saved")
