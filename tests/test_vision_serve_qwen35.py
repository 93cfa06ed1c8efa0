"""`hearth serve QWEN35.gguf --mmproj MMPROJ.gguf` with a tiny Qwen3.5 and its tower (tests/hf_qwen35vl.py): an image
as OpenAI's image_url, Anthropic's image block and Ollama's images answers as transformers'
Qwen3_5ForConditionalGeneration does (greedy, exact linears), and /v1/models says the model reads images through
the qwen3vl_merger projector (tests/test_vision_serve_qwen.py's checks)."""

from __future__ import annotations

import pytest

from hearth.layers.linear import use_linear_policy
from tests.hf_qwen35vl import tiny_qwen35_vl
from tests.test_llm_vision_qwen_e2e import ONE, QWEN3_VL_TEMPLATE, theirs
from tests.test_vision_serve_models import serve
from tests.test_vision_serve_qwen import QUESTION, answers


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """(LM, mmproj, transformers' prompt length and answer) for one image ahead of QUESTION."""
    lm, mmproj, hf, processor = tiny_qwen35_vl(tmp_path_factory.mktemp("qwen35vl-serve"), QWEN3_VL_TEMPLATE)
    typed = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}]
    prompt, _, tokens, _ = theirs(hf, processor, typed, ONE)
    return lm, mmproj, len(prompt), processor[0].decode(tokens)


def test_each_protocol_s_image_answers_as_transformers(files):
    lm, mmproj, length, text = files
    with use_linear_policy(exact=True), serve([str(lm), "--mmproj", str(mmproj)]) as c:
        assert answers(c, lm.stem) == dict.fromkeys(("openai", "anthropic", "ollama"), (length, text))
        assert c.get("/props").json()["modalities"] == {"vision": True, "audio": False}
        (card,) = c.get("/v1/models").json()["data"]
        assert card["hearth"]["vision"] == {"projector": "qwen3vl_merger", "mmproj": str(mmproj)}
