"""`hearth serve GEMMA4.gguf --mmproj MMPROJ.gguf` with a tiny Gemma 4 and its gemma4v mmproj
(tests.test_llm_vision_gemma4's files): an image as OpenAI's image_url, Anthropic's image block and Ollama's images
answers as transformers' Gemma4ForConditionalGeneration does (greedy, exact linears), and /props, /api/show and
/v1/models say the model reads images through that projector."""

from __future__ import annotations

import pytest
import torch

from hearth import LLM, SamplingParams
from hearth.layers.linear import use_linear_policy
from tests.test_llm_vision import url
from tests.test_llm_vision_gemma4 import hf_inputs, tiny_gemma4v
from tests.test_llm_vision_qwen_e2e import ONE, data
from tests.test_vision_serve_models import serve
from tests.test_vision_serve_qwen import QUESTION, STEPS, answers  # answers asks for STEPS tokens


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """(LM, mmproj, transformers' prompt length and answer: the text of its STEPS greedy tokens) for the one image
    of tests.test_llm_vision_qwen_e2e.ONE ahead of QUESTION (Ollama's order)."""
    lm, mmproj, _, hf = tiny_gemma4v(tmp_path_factory.mktemp("gemma4v-serve"))
    with use_linear_policy(exact=True):
        llm = LLM(str(lm), mmproj=str(mmproj), max_model_len=256, progress=False)
    image = data(ONE[0])
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url(image)}},
                                             {"type": "text", "text": QUESTION}]}]
    ids = list(llm.encode_chat(messages))
    with torch.no_grad():
        out = hf.generate(**hf_inputs(llm, hf, image, ids), max_new_tokens=STEPS, do_sample=False, eos_token_id=None,
                          pad_token_id=0)
    # the answer's text as hearth detokenizes it (byte pieces of a random model: partial UTF-8), of the same tokens
    got = llm.chat(messages, SamplingParams(temperature=0, max_tokens=STEPS, ignore_eos=True))[0].outputs[0]
    assert got.token_ids == out[0, len(ids):].tolist()
    return lm, mmproj, len(ids), got.text


def test_each_protocol_s_image_answers_as_transformers(files):
    model, mmproj, length, text = files
    with use_linear_policy(exact=True), serve([str(model), "--mmproj", str(mmproj)]) as c:
        assert answers(c, model.stem) == dict.fromkeys(("openai", "anthropic", "ollama"), (length, text))
        assert c.get("/props").json()["modalities"] == {"vision": True, "audio": False}
        # the file's own keys: Gemma 4's converter names the vision projector apart (it may hold an audio one)
        show = c.post("/api/show", json={"model": model.stem}).json()
        assert "vision" in show["capabilities"] and show["projector_info"]["clip.vision.projector_type"] == "gemma4v"
        (card,) = c.get("/v1/models").json()["data"]
        assert card["hearth"]["vision"] == {"projector": "gemma4v", "mmproj": str(mmproj)}
