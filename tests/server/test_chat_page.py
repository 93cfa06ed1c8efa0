"""The chat page at `/` in headless Chromium (Debian's `chromium` + `chromium-driver`, which
`make test` installs): type a message, see the answer arrive in pieces from the real server."""

from __future__ import annotations

import shutil
import time

import pytest

from tests.server.conftest import API_KEY

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="chromium and chromedriver are not installed "
                                "(apt-get install chromium chromium-driver; `make test` does it)")

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]
# counts changes to the answer's text, to tell a streamed answer from one that lands at once
OBSERVE = """
window.__lengths = [];
new MutationObserver(() => {
  const answers = document.querySelectorAll('.msg.assistant span');
  if (answers.length) window.__lengths.push(answers[answers.length - 1].textContent.length);
}).observe(document.getElementById('log'), {subtree: true, childList: true, characterData: true});
"""


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS + [f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=DRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def test_chat_page_streams_an_answer(browser, real_server):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{real_server.url}/?max_tokens=12")
    browser.find_element(By.ID, "key").send_keys(API_KEY)
    browser.execute_script(OBSERVE)
    box = browser.find_element(By.ID, "input")
    box.send_keys("Hello! Who are you?")
    box.send_keys(Keys.ENTER)
    start = time.monotonic()
    done = WebDriverWait(browser, 300).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.assistant[data-done='true']"))
    assert done and browser.find_elements(By.CSS_SELECTOR, ".msg.user")[0].text.endswith("Hello! Who are you?")
    assert not browser.find_elements(By.CSS_SELECTOR, ".msg.error")
    text = browser.execute_script("return document.querySelector('.msg.assistant span').textContent")
    assert text.strip(), f"empty answer after {time.monotonic() - start:.1f}s"
    lengths = browser.execute_script("return window.__lengths")
    assert len(set(lengths)) >= 3, f"answer arrived in too few pieces: {lengths}"
    assert browser.find_element(By.ID, "model").text == real_server.model
