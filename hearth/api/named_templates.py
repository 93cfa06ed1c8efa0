"""llama-server's built-in chat templates by name (--chat-template llama3), as Jinja, for the formats most asked
for; each written from the model family's published chat format (its Hugging Face tokenizer_config.json
template), laid out as llama.cpp's src/llama-chat.cpp lays out the same name. ChatML and Gemma's are
hearth.api.chat_template's (they are also the fallbacks of a GGUF without a template)."""

from __future__ import annotations

# a message's text: a string, or the text parts of a list of parts
TEXT_MACRO = """{%- macro text(content) -%}
{%- if content is string -%}{{ content }}
{%- else -%}{% for part in content if part['type'] == 'text' %}{{ part['text'] }}{% endfor %}
{%- endif -%}
{%- endmacro -%}
"""



def folded_turns(system: str) -> str:
    """The head of a template whose first user turn carries the system message: `ns.system` is `system` (a Jinja
    expression over `sys`, the system text) or '', and the loop over ns.turns, user and assistant alternating, is
    open for the turn's own text."""
    return TEXT_MACRO + """{%- set ns = namespace(system='', turns=messages) -%}
{%- if messages and messages[0]['role'] == 'system' -%}
{%- set sys = text(messages[0]['content']) -%}
{%- set ns.system = """ + system + """ -%}
{%- set ns.turns = messages[1:] -%}
{%- endif -%}
{%- for message in ns.turns -%}
{%- if (message['role'] == 'user') != (loop.index0 is even) -%}
{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
{%- endif -%}
"""


# Llama 2 chat: <s>[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] A </s><s>[INST] U2 [/INST]
LLAMA2 = folded_turns("'<<SYS>>\\n' ~ sys ~ '\\n<</SYS>>\\n\\n'") + """{%- if message['role'] == 'user' -%}
{{ bos_token ~ '[INST] ' ~ (ns.system if loop.first else '') ~ text(message['content']) | trim ~ ' [/INST]' }}
{%- else -%}
{{ ' ' ~ text(message['content']) | trim ~ ' ' ~ eos_token }}
{%- endif -%}
{%- endfor -%}
"""

# Llama 3 (3.1, 3.2, 3.3 without tools): <|start_header_id|>ROLE<|end_header_id|>\n\nTEXT<|eot_id|>
LLAMA3 = TEXT_MACRO + """{{ bos_token }}
{%- for message in messages -%}
{{ '<|start_header_id|>' ~ message['role'] ~ '<|end_header_id|>\n\n' ~ text(message['content']) | trim ~ '<|eot_id|>' }}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif -%}
"""

# Mistral's v7 tokenizer (Mistral Small 3, Large 2411): [SYSTEM_PROMPT] S[/SYSTEM_PROMPT][INST] U[/INST] A</s>
MISTRAL_V7 = TEXT_MACRO + """{{ bos_token }}
{%- for message in messages -%}
{%- if message['role'] == 'system' -%}{{ '[SYSTEM_PROMPT] ' ~ text(message['content']) ~ '[/SYSTEM_PROMPT]' }}
{%- elif message['role'] == 'user' -%}{{ '[INST] ' ~ text(message['content']) ~ '[/INST]' }}
{%- else -%}{{ ' ' ~ text(message['content']) ~ eos_token }}
{%- endif -%}
{%- endfor -%}
"""

# Phi-3 (and 3.5): <|ROLE|>\nTEXT<|end|>\n
PHI3 = TEXT_MACRO + """{%- for message in messages -%}
{{ '<|' ~ message['role'] ~ '|>\n' ~ text(message['content']) ~ '<|end|>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ '<|assistant|>\n' }}{%- endif -%}
"""

# DeepSeek LLM chat: S\n\nUser: U\n\nAssistant: A<｜end▁of▁sentence｜>User: ...
DEEPSEEK = TEXT_MACRO + """{{ bos_token }}
{%- for message in messages -%}
{%- if message['role'] == 'system' -%}{{ text(message['content']) ~ '\n\n' }}
{%- elif message['role'] == 'user' -%}{{ 'User: ' ~ text(message['content']) ~ '\n\n' }}
{%- else -%}{{ 'Assistant: ' ~ text(message['content']) ~ eos_token }}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ 'Assistant:' }}{%- endif -%}
"""

# DeepSeek V3 and R1: S<｜User｜>U<｜Assistant｜>A<｜end▁of▁sentence｜>
DEEPSEEK3 = TEXT_MACRO + """{{ bos_token }}
{%- for message in messages -%}
{%- if message['role'] == 'system' -%}{{ text(message['content']) }}
{%- elif message['role'] == 'user' -%}{{ '<｜User｜>' ~ text(message['content']) }}
{%- else -%}{{ '<｜Assistant｜>' ~ text(message['content']) ~ eos_token }}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ '<｜Assistant｜>' }}{%- endif -%}
"""

NAMED = {"llama2": LLAMA2, "llama3": LLAMA3, "mistral-v7": MISTRAL_V7, "phi3": PHI3, "deepseek": DEEPSEEK,
         "deepseek3": DEEPSEEK3}
"""llama-server's name -> the template."""
