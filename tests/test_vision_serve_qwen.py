"""`hearth serve LM.gguf --mmproj MM.gguf` with a tiny Qwen2-VL / Qwen2.5-VL / Qwen3-VL
(tests.test_llm_vision_qwen_e2e's files): an image as OpenAI's image_url, Anthropic's image block and Ollama's
images answers as transformers' model does (greedy, exact linears), and /props, /api/show and /v1/models say the
model reads images through that projector."""

from __future__ import annotations

import base64

import pytest

from hearth.layers.linear import use_linear_policy
from tests.test_llm_vision_qwen_e2e import ONE, PROJECTORS, STEPS, data, theirs, tiny_qwen_vl
from tests.test_vision_serve_models import serve

QUESTION = "what is it"


@pytest.fixture(scope="module", params=list(PROJECTORS))
def files(request, tmp_path_factory):
    """(LM, mmproj, its projector type, transformers' prompt length and answer: the text of its STEPS greedy tokens)
    for one image ahead of QUESTION (Ollama's order: a message's images go before its text)."""
    model, mmproj, hf, processor = tiny_qwen_vl(tmp_path_factory.mktemp(request.param), request.param)
    typed = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}]
    ids, _, tokens, _ = theirs(hf, processor, typed, ONE)
    return model, mmproj, PROJECTORS[request.param], len(ids), processor[0].decode(tokens)


def answers(c, name: str) -> dict[str, tuple[int, str]]:
    """Each protocol's (prompt tokens, answer)."""
    b64 = base64.b64encode(data(ONE[0])).decode()
    openai = c.post("/v1/chat/completions", json={
        "model": name, "max_tokens": STEPS, "temperature": 0, "ignore_eos": True, "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + b64}},
            {"type": "text", "text": QUESTION}]}]})
    anthropic = c.post("/v1/messages", json={
        "model": name, "max_tokens": STEPS, "temperature": 0, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}},
            {"type": "text", "text": QUESTION}]}]})
    ollama = c.post("/api/chat", json={
        "model": name, "stream": False, "options": {"temperature": 0, "num_predict": STEPS},
        "messages": [{"role": "user", "content": QUESTION, "images": [b64]}]})
    for r in (openai, anthropic, ollama):
        assert r.status_code == 200, r.text
    openai, anthropic, ollama = openai.json(), anthropic.json(), ollama.json()
    return {"openai": (openai["usage"]["prompt_tokens"], openai["choices"][0]["message"]["content"]),
            "anthropic": (sum(v for k, v in anthropic["usage"].items() if k.endswith("input_tokens") and v),  # + cached
                          anthropic["content"][0]["text"]),
            "ollama": (ollama["prompt_eval_count"], ollama["message"]["content"])}


def test_each_protocol_s_image_answers_as_transformers(files):
    model, mmproj, projector, length, text = files
    with use_linear_policy(exact=True), serve([str(model), "--mmproj", str(mmproj)]) as c:
        # the same prompt (an Anthropic image's blocks once joined with newlines: a token more) and answer
        assert answers(c, model.stem) == dict.fromkeys(("openai", "anthropic", "ollama"), (length, text))
        assert c.get("/props").json()["modalities"] == {"vision": True, "audio": False}
        show = c.post("/api/show", json={"model": model.stem}).json()
        assert "vision" in show["capabilities"] and show["projector_info"]["clip.projector_type"] == projector
        (card,) = c.get("/v1/models").json()["data"]
        assert card["hearth"]["vision"] == {"projector": projector, "mmproj": str(mmproj)}
