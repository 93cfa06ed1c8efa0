"""The chat page at `/` in headless Chromium (Debian's `chromium` + `chromium-driver`, which
`make test` installs), against the app around a scripted fake engine (tests/server/fakes.py)
served by uvicorn in this process, so answers are exact and the engine's aborts are visible.

One browser session walks through what a user does: a streamed markdown answer, stop (and the
server aborting the request), a second model, reasoning, a tool call, settings, conversations
kept over a reload, rename and delete. A screenshot of the page is saved under pytest's tmp dir."""

from __future__ import annotations

import json

import pytest

from tests.server.chat_browser import CHROMIUM, DRIVER, MODELS, WAIT, PageServer, chromium, fresh
from tests.server.conftest import API_KEY

pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="chromium and chromedriver are not installed "
                                "(apt-get install chromium chromium-driver; `make test` does it)")

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
# the request bodies the page sends to /v1/chat/completions, recorded in the page
RECORD_FETCH = """
window.__bodies = [];
const original = window.fetch;
window.fetch = (url, options) => {
  if (String(url).includes('/chat/completions')) window.__bodies.push(JSON.parse(options.body));
  return original(url, options);
};
"""


@pytest.fixture(scope="module")
def page_server():
    with PageServer() as server:
        yield server


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = chromium(tmp_path_factory.mktemp("chromium"))
    try:
        yield driver
    finally:
        driver.quit()


def test_chat_page(browser, page_server, tmp_path):
    page = fresh(browser, page_server.url)
    page.find("#key").send_keys(API_KEY + "\t")  # change event: saved, models listed again
    page.wait(lambda: [o.get_attribute("value") for o in page.all("#model option")] == list(MODELS), "the models")
    browser.execute_script(RECORD_FETCH)

    _markdown_answer(page, page_server)
    _stop(page, page_server)
    _second_model(page, page_server)
    _reasoning_and_settings(page, page_server)
    _tool_call(page)
    # everything the page loaded came from hearth (it works without a network: no CDN)
    loaded = browser.execute_script("return performance.getEntriesByType('resource').map((e) => e.name)")
    assert loaded and all(url.startswith(page_server.url + "/") for url in loaded), loaded
    for name, scroll in [("chat_page.png", 0), ("chat_page_end.png", 10**6)]:  # the top, then the end
        browser.execute_script("document.getElementById('messages').scrollTop = arguments[0]", scroll)
        assert browser.save_screenshot(str(tmp_path / name))
        print(f"\nchat page screenshot: {tmp_path / name}")
    _reload_keeps_conversations(page)


def _markdown_answer(page, server):
    answer = page.send("Show me script:markdown")
    body = page.d.execute_script("return window.__bodies[0]")
    assert body["stream"] and body["stream_options"] == {"include_usage": True} and body["model"] == MODELS[0]
    assert body["messages"] == [{"role": "user", "content": "Show me script:markdown"}]
    content = answer.find_element(page.By.CSS_SELECTOR, ".content")
    assert content.find_element(page.By.TAG_NAME, "h2").text == "Fibonacci"
    assert content.find_element(page.By.TAG_NAME, "strong").text == "fast"
    assert [li.text for li in content.find_elements(page.By.CSS_SELECTOR, "ol > li")] == ["start at zero", "add"]
    assert content.find_element(page.By.CSS_SELECTOR, "p > code").text == "a, b = b, a + b"
    link = content.find_element(page.By.CSS_SELECTOR, "a")
    assert link.get_attribute("href") == "https://docs.python.org/3/" and link.text == "the docs"
    code = content.find_element(page.By.CSS_SELECTOR, ".code-block pre code")
    assert code.text.startswith("def fib(n):\n    a, b = 0, 1  # the first two")
    assert [k.text for k in code.find_elements(page.By.CSS_SELECTOR, ".tok-k")][:3] == ["def", "for", "in"]
    assert code.find_element(page.By.CSS_SELECTOR, ".tok-c").text == "# the first two"
    # per answer: the model, time to first token, tokens/s and the token count from the usage chunk
    meta = answer.find_element(page.By.CSS_SELECTOR, ".meta")
    assert meta.find_element(page.By.CSS_SELECTOR, ".model").text == MODELS[0]
    assert meta.find_element(page.By.CSS_SELECTOR, ".ttft").text.startswith("TTFT ")
    assert meta.find_element(page.By.CSS_SELECTOR, ".tps").text.endswith(" tok/s")
    assert meta.find_element(page.By.CSS_SELECTOR, ".tokens").text == "7 tokens"  # one token per scripted piece
    page.d.execute_cdp_cmd("Browser.grantPermissions", {"origin": server.url,
                                                        "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
    answer.find_element(page.By.CSS_SELECTOR, ".code-block .copy").click()
    copied = page.d.execute_async_script("navigator.clipboard.readText().then(arguments[0])")
    assert copied == code.text + "\n" or copied == code.text
    assert page.chats() == ["Show me script:markdown"]  # the conversation is titled by its first message


def _stop(page, server):
    answer = page.send("Count forever script:slow", until=None)
    page.wait(lambda: "tick" in answer.find_element(page.By.CSS_SELECTOR, ".content").text, "the first pieces")
    assert answer.get_attribute("data-state") == "streaming"  # pieces are shown as they arrive
    rid = server.engine.added[-1].request_id
    assert page.find("#send").is_displayed() is False
    page.find("#stop").click()
    page.wait(lambda: answer.get_attribute("data-state") == "stopped", "the answer to stop")
    meta = answer.find_element(page.By.CSS_SELECTOR, ".meta")
    assert "stopped" in meta.text and "TTFT" in meta.text
    page.wait(lambda: rid in server.engine.aborted, "the server to abort the request")  # it saw the disconnect
    assert rid not in server.engine.live and page.find("#send").is_displayed()


def _second_model(page, server):
    from selenium.webdriver.support.ui import Select

    Select(page.find("#model")).select_by_value(MODELS[1])
    answer = page.send("And you? script:hello")  # the fake answers the prompt's last script:NAME
    body = page.d.execute_script("return window.__bodies.at(-1)")
    assert body["model"] == MODELS[1]
    # the history goes with it: the stopped answer's pieces included, as the user saw them
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user", "assistant", "user"]
    assert body["messages"][3]["content"].startswith("tick")
    assert answer.find_element(page.By.CSS_SELECTOR, ".content").text == "Hello there!"
    # the model asked for is the one the response names: no "asked → answered by"
    assert answer.find_element(page.By.CSS_SELECTOR, ".meta .model").text == MODELS[1]


def _reasoning_and_settings(page, server):
    page.find("#settings-toggle").click()
    page.find("#system").send_keys("You are terse.")
    page.find("#temperature").send_keys("0.3")
    page.find("#top-p").send_keys("0.9")
    page.find("#max-tokens").send_keys("64")
    answer = page.send("Greet me script:think")
    added = server.engine.added[-1]
    assert added.prompt.startswith("<|im_start|>system\nYou are terse.<|im_end|>")
    assert added.params.temperature == pytest.approx(0.3) and added.params.top_p == pytest.approx(0.9)
    assert added.params.max_tokens == 64
    reasoning = answer.find_element(page.By.CSS_SELECTOR, "details.reasoning")
    assert reasoning.is_displayed() and reasoning.get_attribute("open") is None  # collapsed
    assert not reasoning.find_element(page.By.CSS_SELECTOR, ".reasoning-text").is_displayed()
    reasoning.find_element(page.By.TAG_NAME, "summary").click()
    assert reasoning.find_element(page.By.CSS_SELECTOR, ".reasoning-text").text == "The user wants a greeting."
    reasoning.find_element(page.By.TAG_NAME, "summary").click()  # and closed again
    assert answer.find_element(page.By.CSS_SELECTOR, ".content").text == "Hi!"


def _tool_call(page):
    page.find("#settings details summary").click()
    page.d.execute_script("const t = document.getElementById('tools'); t.value = arguments[0];"
                          "t.dispatchEvent(new Event('input'))", json.dumps(TOOLS))
    assert page.find("#tools-error").text == ""
    page.find("#settings-toggle").click()
    answer = page.send("Weather in Paris? script:tool")
    assert page.d.execute_script("return window.__bodies.at(-1).tools") == TOOLS
    assert answer.find_element(page.By.CSS_SELECTOR, ".content").text == "Let me check."
    call = answer.find_element(page.By.CSS_SELECTOR, ".tool-call")
    assert call.find_element(page.By.CSS_SELECTOR, ".tool-name").text == "get_weather"
    assert json.loads(call.find_element(page.By.CSS_SELECTOR, "pre code").text) == {"city": "Paris"}
    # the user answers the call with the tool's result; the model goes on from it
    call_id = page.d.execute_script("return JSON.parse(localStorage.getItem('hearth-chats-v1'))[0].messages.at(-1).tool_calls[0].id")
    call.find_element(page.By.CSS_SELECTOR, ".tool-result-form textarea").send_keys("18 C, sunny script:hello")
    before = len(page.answers())
    call.find_element(page.By.CSS_SELECTOR, ".send-result").click()
    page.wait(lambda: len(page.answers()) > before and page.answers()[-1].get_attribute("data-state") == "done",
              "the answer after the tool result")
    sent = page.d.execute_script("return window.__bodies.at(-1).messages.slice(-2)")
    assert sent[0]["tool_calls"] == [{"id": call_id, "type": "function",
                                      "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]
    assert sent[1] == {"role": "tool", "tool_call_id": call_id, "content": "18 C, sunny script:hello"}
    assert page.find(".msg.tool .tool-output").text == "18 C, sunny script:hello"
    assert page.answers()[-1].find_element(page.By.CSS_SELECTOR, ".content").text == "Hello there!"
    # Retry asks again for the last answer: the same request, one answer in its place
    requests = page.d.execute_script("return window.__bodies.length")
    page.answers()[-1].find_element(page.By.CSS_SELECTOR, ".retry").click()
    page.wait(lambda: page.d.execute_script("return window.__bodies.length") == requests + 1, "the retry")
    page.wait(lambda: page.answers()[-1].get_attribute("data-state") == "done", "the retried answer")
    assert page.d.execute_script("return window.__bodies.at(-1)") == page.d.execute_script("return window.__bodies.at(-2)")
    assert len(page.answers()) == before + 1 and len(page.all(".retry")) == 1


def _reload_keeps_conversations(page):
    before = [(m.get_attribute("class"), m.text) for m in page.all(".msg")]
    page.d.refresh()
    page.wait(lambda: len(page.all(".msg")) == len(before), "the conversation after the reload")
    assert [(m.get_attribute("class"), m.text) for m in page.all(".msg")] == before
    assert page.find("#model").get_attribute("value") == MODELS[1] and page.find("#system").get_attribute("value") == "You are terse."
    assert page.find("#key").get_attribute("value") == API_KEY
    # a second conversation; rename the first; delete the second
    page.find("#new-chat").click()
    assert page.all(".msg") == [] and page.find("#empty").is_displayed()
    page.send("Hello")
    assert page.chats() == ["Hello", "Show me script:markdown"]
    from selenium.webdriver.common.action_chains import ActionChains

    first = page.all("#chats .chat-item")[1]  # its buttons show on hover
    ActionChains(page.d).move_to_element(first).click(first.find_element(page.By.CSS_SELECTOR, ".rename")).perform()
    page.find("#chats .rename-input").send_keys("Fibonacci notes\n")  # the old title is selected: typing replaces it
    page.wait(lambda: page.chats() == ["Hello", "Fibonacci notes"], "the rename")
    for _ in range(2):  # the bin, then the confirmation
        page.all("#chats .chat-item")[0].find_element(page.By.CSS_SELECTOR, ".delete").click()
    page.wait(lambda: page.chats() == ["Fibonacci notes"], "the delete")
    page.d.refresh()
    page.wait(lambda: page.chats() == ["Fibonacci notes"] and len(page.all(".msg")) == len(before), "the list after a reload")


MARKDOWN_CASES = [  # (markdown, the HTML the page renders)
    ("- a\n  - b\n- c", "<ul><li>a<ul><li>b</li></ul></li><li>c</li></ul>"),
    ("3. three\n4. four", '<ol start="3"><li>three</li><li>four</li></ol>'),
    ("* a\n\n* b", "<ul><li>a</li><li>b</li></ul>"),
    ("text\n- item", "<p>text</p><ul><li>item</li></ul>"),
    ("> q\n> more", "<blockquote><p>q<br>more</p></blockquote>"),
    ("| a | b |\n|---|--:|\n| 1 | 2 |", '<div class="table-wrap"><table><thead><tr><th>a</th><th style="text-align:right">b'
     '</th></tr></thead><tbody><tr><td>1</td><td style="text-align:right">2</td></tr></tbody></table></div>'),
    ("## T ##\n***", "<h2>T</h2><hr>"),
    ("**bold _it_** ~~gone~~ snake_case", "<p><strong>bold <em>it</em></strong> <del>gone</del> snake_case</p>"),
    ("`a` and ``b`c``", "<p><code>a</code> and <code>b`c</code></p>"),
    ("```\nplain <b>\n```", '<div class="code-block"><div class="code-head"><span class="code-lang">code</span><button '
     'type="button" class="copy" title="Copy code">Copy</button></div><pre><code class="lang-code">plain &lt;b&gt;</code></pre></div>'),
    ("```js\nlet s = 'x'", '<div class="code-block"><div class="code-head"><span class="code-lang">js</span><button '
     'type="button" class="copy" title="Copy code">Copy</button></div><pre><code class="lang-js"><span class="tok-k">let</span> s = '
     '<span class="tok-s">&#39;x&#39;</span></code></pre></div>'),  # still streaming: an open fence is code up to the end
]


def test_markdown_renderer_cases(browser, page_server):
    browser.get(page_server.url + "/")
    got = browser.execute_async_script("""
        const done = arguments[1];
        import('/static/markdown.js').then((m) => done(arguments[0].map((c) => m.renderMarkdown(c))));""",
                                       [md for md, _ in MARKDOWN_CASES])
    assert list(zip([md for md, _ in MARKDOWN_CASES], got)) == MARKDOWN_CASES


def test_think_tags_in_the_content_are_reasoning(browser, page_server):
    """A server that did not split <think> off the content: the page does, while it streams too."""
    browser.get(page_server.url + "/")
    cases = [("<think>plan</think>\n\nAnswer", ["plan", "Answer"]), ("  <think>still going", ["still going", ""]),
             ("No thoughts <think>here</think>", ["", "No thoughts <think>here</think>"])]
    got = browser.execute_async_script("""
        const done = arguments[1];
        import('/static/stream.js').then((m) => done(arguments[0].map((c) => m.splitThink(c))));""",
                                       [text for text, _ in cases])
    assert got == [want for _, want in cases]


def test_markdown_renderer_is_safe(browser, page_server):
    """Model output cannot become markup: tags are text, links keep only http(s)/mailto/relative targets."""
    browser.get(page_server.url + "/")
    evil = ("<script>window.__pwned = 1</script> <img src=x onerror=\"window.__pwned = 1\"> "
            "[a](javascript:window.__pwned=1) [b](java\tscript:alert(1)) [c](JAVASCRIPT:alert(1)) [d](/ok) "
            "`<b>code</b>`\n\n```html\n<script>alert(1)</script>\n```")
    found = browser.execute_async_script("""
        const done = arguments[1];
        import('/static/markdown.js').then((m) => {
          const div = document.createElement('div');
          div.innerHTML = m.renderMarkdown(arguments[0]);
          document.body.append(div);
          done({elements: div.querySelectorAll('script, img, [onerror], b').length,
                hrefs: [...div.querySelectorAll('a')].map((a) => a.getAttribute('href')),
                text: div.textContent, pwned: window.__pwned || 0});
        });""", evil)
    assert found["elements"] == 0 and found["pwned"] == 0
    assert found["hrefs"] == ["/ok"]
    assert "<script>window.__pwned = 1</script>" in found["text"] and "<b>code</b>" in found["text"]


def test_assets_are_served_without_the_key(page_server):
    import httpx2

    for path, kind in [("/", "text/html"), ("/static/app.js", "text/javascript"), ("/static/style.css", "text/css"),
                       ("/favicon.ico", "image/svg+xml")]:
        r = httpx2.get(page_server.url + path, timeout=WAIT)
        assert r.status_code == 200 and r.headers["content-type"].startswith(kind), path
    missing = httpx2.get(page_server.url + "/static/nope.js", timeout=WAIT)
    assert missing.status_code == 404 and "/static/nope.js" in missing.json()["error"]["message"]
    assert httpx2.get(page_server.url + "/v1/models", timeout=WAIT).status_code == 401  # the API still needs it


def test_model_picker_shows_the_loaded_flag(browser, page_server):
    """hearth's servers of several models mark each /v1/models entry (`hearth.loaded`); the picker shows
    it, and lists each model once (not its aliases, such as its file's name)."""
    from hearth.api.model_pool import ModelPool
    from tests.server.fakes import fake_served

    pool = ModelPool.of([fake_served(names=("big", "big-q4_k_m.gguf")), fake_served(names=("small",))])
    cards = pool.cards()  # /v1/models' entries as the server writes them
    for card in cards:
        card["hearth"]["loaded"] = card["root"] == "big"
    page = fresh(browser, page_server.url)
    browser.execute_script("""
        const original = window.fetch, cards = arguments[0];
        window.fetch = (url, options) => String(url).endsWith('v1/models')
          ? Promise.resolve(new Response(JSON.stringify({object: 'list', data: cards})))
          : original(url, options);
        document.getElementById('key').dispatchEvent(new Event('change'));""", cards)
    page.wait(lambda: [o.text for o in page.all("#model option")] == ["● big", "○ small"], "the marked models")
    from selenium.webdriver.support.ui import Select

    assert page.find("#model-state").text == "loaded"
    Select(page.find("#model")).select_by_value("small")
    assert page.find("#model-state").text == "loads on first use"
    browser.execute_script("window.fetch = () => new Promise(() => {})")  # a model that takes its time to load
    answer = page.send("Hi", until=None)
    assert answer.find_element(page.By.CSS_SELECTOR, ".loading").text == "loading the model…"


def test_chat_page_with_a_real_model(browser, real_server):
    """The page against `hearth serve` on SmolLM2: a greedy answer capped by the conversation's max tokens."""
    page = fresh(browser, real_server.url)
    page.find("#key").send_keys(API_KEY + "\t")
    page.wait(lambda: page.find("#model").get_attribute("value") == real_server.model, "the model")
    page.find("#settings-toggle").click()
    page.find("#temperature").send_keys("0")
    page.find("#max-tokens").send_keys("8")
    answer = page.send("Hello! Who are you?")
    assert answer.find_element(page.By.CSS_SELECTOR, ".content").text.strip()
    tokens = answer.find_element(page.By.CSS_SELECTOR, ".meta .tokens").text
    assert 1 <= int(tokens.split()[0]) <= 8, tokens
    # stop: the server aborts the request (it leaves the batch without finishing)
    with real_server.http() as http:
        finished = _metric(http, "hearth:request_success_total")
        assert finished >= 1  # the answer above: the counter is there
        page.find("#max-tokens").clear()
        page.find("#max-tokens").send_keys("400")
        # SmolLM2's greedy answer to this runs to max tokens (400: seconds even on a quiet machine);
        # "Count from 1 to 500, one number per line." ended after 122 tokens, before the click
        answer = page.send("Write the numbers from 1 to 1000, separated by commas.", until=None)
        page.wait(lambda: answer.find_element(page.By.CSS_SELECTOR, ".content").text.strip(), "the first tokens")
        page.find("#stop").click()
        page.wait(lambda: answer.get_attribute("data-state") == "stopped", "the answer to stop")
        page.wait(lambda: _metric(http, "hearth:num_requests_running") == 0, "the request to leave the batch")
        assert _metric(http, "hearth:request_success_total") == finished  # aborted, not finished


def _metric(http, name: str) -> float:
    """The sum of a Prometheus metric's samples over its labels."""
    lines = http.get("/metrics").text.splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(name + "{") or line.startswith(name + " "))
