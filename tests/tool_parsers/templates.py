"""Excerpts of real chat templates: the parts that show their tool-call and reasoning syntax."""

from __future__ import annotations

_QWEN_TOOLS = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {{- "# Tools\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}{{- "\\n" }}{{- tool | tojson }}{%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- endif %}
{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endfor %}
"""
QWEN25 = _QWEN_TOOLS + """{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}"""
QWEN3 = _QWEN_TOOLS + """{%- if reasoning_content %}{{- '<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' }}{%- endif %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}"""
QWEN3_CODER = _QWEN_TOOLS + """
{%- for tool_call in message.tool_calls %}
    {{- '<tool_call>\\n<function=' + tool_call.name + '>\\n' }}
    {%- for name, value in tool_call.arguments.items() %}{{- '<parameter=' + name + '>\\n' }}{%- endfor %}
{%- endfor %}"""
QWQ = _QWEN_TOOLS + """{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n<think>\\n' }}
{%- endif %}"""
DEEPSEEK_R1 = """{% for message in messages %}{% if message['role'] == 'assistant' %}{% set content = message['content'] %}{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{% endif %}{% endfor %}{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\\n'}}{% endif %}"""
MISTRAL = """{%- if tools is not none and (message == user_messages[-1]) %}
    {{- "[AVAILABLE_TOOLS] [" }}{%- for tool in tools %}{{- tool | tojson }}{%- endfor %}{{- "[/AVAILABLE_TOOLS]" }}
{%- endif %}
{%- if message.tool_calls is defined %}{{- "[TOOL_CALLS] [" }}{%- endif %}"""
LLAMA31 = """{%- if builtin_tools is defined or tools is not none %}{{- "Environment: ipython\\n" }}{%- endif %}
{%- if builtin_tool_calls %}{{- "<|python_tag|>" + tool_call.name + ".call(" }}
{%- else %}{{- '{"name": "' + tool_call.name + '", ' }}{{- '"parameters": ' }}{{- tool_call.arguments | tojson }}{{- "}" }}{%- endif %}"""
LLAMA32 = """{%- if tools is not none %}{{- "Given the following functions, please respond with a JSON for a function call." }}{%- endif %}
{{- '{"name": "' + tool_call.name + '", ' }}{{- '"parameters": ' }}{{- tool_call.arguments | tojson }}"""
CHATML = """{%- for message in messages -%}{{ '<|im_start|>' ~ message['role'] ~ '\\n' ~ message['content'] ~ '<|im_end|>\\n' }}
{%- endfor -%}{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"""
TOOLS_ONLY_IN_TEXT = """You have no tools. {{ 'no tools here either' }}{{ messages[0]['content'] }}"""
# gpt-oss (harmony): reasoning is read as `thinking`, only a message's first tool call is written, and
# a tool result names the last call's function
HARMONY = """{{- "<|start|>system<|message|>Reasoning: medium\\n\\n# Valid channels: analysis, commentary, final.<|end|>" }}
{%- if tools %}{{- "<|start|>developer<|message|># Tools\\n\\nnamespace functions {\\n" }}
{%- for tool in tools %}{{- "type " + tool.function.name + " = (_: " + tool.function.parameters | tojson + ") => any;\\n" }}{%- endfor %}
{{- "} // namespace functions<|end|>" }}{%- endif %}
{%- set last_tool_call = namespace(name=none) %}
{%- for message in messages -%}
{%- if message.role == 'assistant' -%}
{%- if "tool_calls" in message %}
{%- set tool_call = message.tool_calls[0] %}{%- if tool_call.function %}{%- set tool_call = tool_call.function %}{%- endif %}
{%- if message.thinking %}{{- "<|start|>assistant<|channel|>analysis<|message|>" + message.thinking + "<|end|>" }}{%- endif %}
{{- "<|start|>assistant to=functions." + tool_call.name + "<|channel|>commentary json<|message|>" }}
{{- tool_call.arguments|tojson + "<|call|>" }}{%- set last_tool_call.name = tool_call.name %}
{%- else %}{{- "<|start|>assistant<|channel|>final<|message|>" + message.content + "<|end|>" }}{%- endif %}
{%- elif message.role == 'tool' -%}
{{- "<|start|>functions." + last_tool_call.name + " to=assistant<|channel|>commentary<|message|>" + message.content|tojson + "<|end|>" }}
{%- else -%}{{- "<|start|>" + message.role + "<|message|>" + message.content + "<|end|>" }}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}"""
# Gemma 4: calls in its own object syntax, a thought channel that the generation prompt closes empty
# unless enable_thinking (the markers of google/gemma-4-*-it's template, cut to what detection reads)
GEMMA4 = """{{- bos_token -}}{%- if tools -%}{{- '<|turn>system\\n' -}}{%- for tool in tools %}
{{- '<|tool>declaration:' + tool['function']['name'] + '<tool|>' -}}{%- endfor %}{{- '<turn|>\\n' -}}{%- endif %}
{%- for message in messages -%}{{- '<|turn>' + ('model' if message['role'] == 'assistant' else message['role']) + '\\n' }}
{%- for tool_call in message.get('tool_calls') or [] -%}
{{- '<|tool_call>call:' + tool_call['function']['name'] + '{' -}}{{- '}<tool_call|>' -}}{%- endfor -%}
{{- message['content'] }}<turn|>{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|turn>model\\n' -}}
{%- if not enable_thinking | default(false) -%}{{- '<|channel>thought\\n<channel|>' -}}{%- endif -%}{%- endif -%}"""
# an older Gemma 4 template (the first GGUFs'): no `role: tool` messages, an assistant turn's `tool_responses`
GEMMA4_OLD = """{%- if tools -%}{{- '<|turn>system\n<|tool>' + tools | length | string + '<tool|><turn|>\n' -}}{%- endif -%}
{%- for message in messages -%}{{- '<|turn>' + ('model' if message['role'] == 'assistant' else message['role']) + '\\n' }}
{%- for tool_call in message.get('tool_calls') or [] -%}
{{- '<|tool_call>call:' + tool_call['function']['name'] + '{}<tool_call|>' -}}{%- endfor -%}
{%- for r in message.get('tool_responses') or [] -%}{{- '<|tool_response>response:' + r['name'] + '{' -}}
{%- if r['response'] is mapping -%}{%- for k, v in r['response'] | dictsort -%}{{ k }}:{{ v }}{%- endfor -%}
{%- else -%}value:{{ r['response'] }}{%- endif -%}{{- '}<tool_response|>' -}}{%- endfor -%}
{{- message['content'] or '' }}<turn|>{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|turn>model\\n' -}}{%- endif -%}"""
