"""How much image a request and the Responses store may hold: --limit-mm-per-prompt's count is a 400
naming it; the store keeps image bytes up to a budget, and a follow-up whose images it dropped is a 400."""

from __future__ import annotations

import argparse

import pytest

from hearth.commands.vision_flags import image_limit
from tests.api.vision_fakes import data_url, image, vision_client


def test_more_images_than_the_limit_is_a_400_naming_the_count():
    parts = [{"type": "image_url", "image_url": {"url": data_url(image(1))}} for _ in range(3)]
    client, engine = vision_client(max_images=2)
    with client:
        ok = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": parts[:2]}]})
        r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": parts}]})
    assert ok.status_code == 200, ok.text
    assert r.status_code == 400 and len(engine.added) == 1, r.text
    err = r.json()["error"]
    assert err["param"] == "messages[0].content[2].image_url.url" and "more than 2 images" in err["message"]
    assert "--limit-mm-per-prompt" in err["message"]


@pytest.mark.parametrize("text,n", [('{"image": 4}', 4), ("image=3", 3), ("{}", None)])
def test_limit_flag_takes_vllms_forms(text, n):
    assert image_limit(text) == n


@pytest.mark.parametrize("text", ['{"video": 1}', "image=x", '{"image": -1}'])
def test_limit_flag_refuses_what_is_no_image_count(text):
    with pytest.raises(argparse.ArgumentTypeError):
        image_limit(text)


def test_the_store_keeps_image_bytes_to_a_budget_and_a_follow_up_on_dropped_ones_is_a_400():
    client, _ = vision_client()
    big, small = image(2, b"x" * 60), image(1, b"y" * 60)

    def ask(data, prev=None):
        return client.post("/v1/responses", json={"model": "fake-model", "previous_response_id": prev, "input": [
            {"role": "user", "content": [{"type": "input_image", "image_url": data_url(data)}]}]})

    with client:
        client.app.state.responses.max_image_bytes = 100  # each image is 64 bytes: one fits
        first, second = ask(big), ask(small)
        assert first.status_code == second.status_code == 200
        again = client.post("/v1/responses", json={"model": "fake-model", "previous_response_id": second.json()["id"],
                                                   "input": "and?"})
        dropped = client.post("/v1/responses", json={"model": "fake-model", "input": "and?",
                                                     "previous_response_id": first.json()["id"]})
    assert again.status_code == 200, again.text
    assert dropped.status_code == 400 and "no longer keeps" in dropped.text, dropped.text
    assert dropped.json()["error"]["param"] == "input[0].content[0].image_url"
