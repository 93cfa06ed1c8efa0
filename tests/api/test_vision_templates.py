"""Chat templates and image markers: a template that reads content only as typed parts (SmolVLM's) gets
text parts, each marker one of its own; text parts join with newlines, none beside an image (HF's layout)."""

from __future__ import annotations

from hearth.api.chat_template import ChatTemplate
from hearth.api.media_parts import RequestImages, Vision
from hearth.api.messages import openai_messages
from tests.api.vision_fakes import AFTER, BEFORE, PLACEHOLDER, data_url, fake_prepare, image, vision_client
from tests.server.fakes import TEMPLATE

# SmolVLM-Instruct's template (tokenizer_config.json): it loops over message['content'] as typed parts
SMOLVLM = ("<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}{% if message['content'][0]['type'] "
           "== 'image' %}{{':'}}{% else %}{{': '}}{% endif %}{% for line in message['content'] %}{% if line['type'] == "
           "'text' %}{{line['text']}}{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}"
           "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}")
# the image branch of gemma-3-*-it's template, trimmed to what matters here
GEMMA3 = ("{%- for message in messages -%}{{ '<start_of_turn>user\n' }}{%- if message['content'] is string -%}"
          "{{ message['content'] | trim }}{%- else -%}{%- for item in message['content'] -%}{%- if item['type'] == "
          "'image' -%}{{ '<start_of_image>' }}{%- elif item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}"
          "{%- endfor -%}{%- endif -%}{{ '<end_of_turn>\n' }}{%- endfor -%}")


def test_a_template_that_reads_typed_parts_is_found_once():
    assert ChatTemplate(SMOLVLM, "", "", "llama").typed_content
    assert not ChatTemplate(TEMPLATE, "", "", "llama").typed_content
    assert not ChatTemplate(GEMMA3, "", "", "gemma3").typed_content  # it reads both: strings stay strings
    assert ChatTemplate(SMOLVLM, "", "", "llama").render([{"role": "user", "content": "What is 2+2?"}]) == \
        "<|im_start|>User: What is 2+2?<end_of_utterance>\nAssistant:"


def test_smolvlm_template_keeps_the_text_and_the_image():
    client, engine = vision_client(template=SMOLVLM)
    with client:
        r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": data_url(image(2))}}]}]})
    assert r.status_code == 200, r.text
    rows = BEFORE + PLACEHOLDER * 2 + AFTER
    assert engine.added[-1].prompt == f"<|im_start|>User: What is this?{rows}<end_of_utterance>\nAssistant:"


def test_no_newline_beside_an_image_as_hf_gemma3_lays_it_out():
    images = RequestImages(Vision(None, fake_prepare))
    content = [{"type": "text", "text": "Describe"}, {"type": "image_url", "image_url": data_url(image(3))},
               {"type": "text", "text": "please."}, {"type": "text", "text": "Now."}]
    (msg,) = openai_messages([{"role": "user", "content": content}], images=images)
    assert msg["content"] == f"Describe{images.marker(0)}please.\nNow."
    before, after = "\n\n<start_of_image>", "<end_of_image>\n\n"  # Gemma3's PreparedImage.before/after
    ours = ChatTemplate(GEMMA3, "", "", "gemma3").render([msg], add_generation_prompt=False)
    assert ours.replace(images.marker(0), before + "S" * 3 + after) == \
        "<start_of_turn>user\nDescribe\n\n<start_of_image>SSS<end_of_image>\n\nplease.\nNow.<end_of_turn>\n"
