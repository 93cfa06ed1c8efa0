"""The chat page's test harness: the fake app under uvicorn in this process, headless Chromium,
and what a user sees and does on the page (tests/server/test_chat_page.py)."""

from __future__ import annotations

import shutil
import socket
import threading
import time

from tests.server.conftest import API_KEY
from tests.server.fakes import FakeEngine, fake_served

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1280,1100"]
MODELS = ("fake-model", "fake-other")  # two served models: what the picker chooses between
FILE_ALIAS = "fake-model-q4_k_m.gguf"  # the first one's file name, listed as its alias: not in the picker
WAIT = 120  # seconds for anything the page does (the fake answers in milliseconds; SmolLM2 on a loaded CI machine in seconds)


class PageServer:
    """An app under uvicorn on a free loopback port, in a thread of this process: the fake one of two models
    (MODELS, with API_KEY) unless given one."""

    def __init__(self, app=None):
        import uvicorn

        from hearth.api.app import ServerConfig, create_app
        from hearth.api.model_pool import ModelPool

        if app is None:
            self.engine = FakeEngine()  # both models answer from it: its requests name the model
            pool = ModelPool.of([fake_served(engine=self.engine, names=(MODELS[0], FILE_ALIAS)),
                                 fake_served(engine=self.engine, names=(MODELS[1],))])
            app = create_app(pool, ServerConfig(api_key=API_KEY))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + WAIT
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(WAIT)


def chromium(profile_dir):
    """Headless Chromium through chromedriver, with its profile in `profile_dir`."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS + [f"--user-data-dir={profile_dir}"]:
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=Service(executable_path=DRIVER))


class Page:
    """What a user sees and does, in selenium's words."""

    def __init__(self, driver):
        from selenium.webdriver.common.by import By

        self.d, self.By = driver, By

    def find(self, css):
        return self.d.find_element(self.By.CSS_SELECTOR, css)

    def all(self, css):
        return self.d.find_elements(self.By.CSS_SELECTOR, css)

    def wait(self, check, what: str):
        from selenium.webdriver.support.ui import WebDriverWait

        return WebDriverWait(self.d, WAIT).until(lambda d: check(), message=f"waited {WAIT}s for {what}")

    def answers(self):
        return self.all(".msg.assistant")

    def send(self, text: str, until: str = "done"):
        """Type `text`, press Enter; wait until the new answer's state is `until` (None: don't wait)."""
        from selenium.webdriver.common.keys import Keys

        before = len(self.answers())
        box = self.find("#input")
        box.send_keys(text)
        box.send_keys(Keys.ENTER)
        self.wait(lambda: len(self.answers()) > before, "the answer to appear")
        answer = self.answers()[-1]
        if until:
            self.wait(lambda: answer.get_attribute("data-state") not in ("streaming", None), f"the answer to {text!r}")
            assert answer.get_attribute("data-state") == until, answer.text
        return answer

    def chats(self):
        return [e.text for e in self.all("#chats .chat-title")]


def fresh(browser, url: str):
    """The page as a first visit sees it: nothing in the browser's storage."""
    browser.get(url + "/")
    browser.execute_script("localStorage.clear()")
    browser.refresh()
    return Page(browser)
