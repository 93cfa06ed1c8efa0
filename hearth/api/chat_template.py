"""Chat messages (+ tools) -> prompt text, by the model's Jinja chat template.

Rendered the way Hugging Face `apply_chat_template` does (transformers/utils/chat_template_utils.py):
an immutable sandbox with trim_blocks/lstrip_blocks, loop controls, `{% generation %}` blocks,
`raise_exception`, `strftime_now`, a `tojson` that keeps non-ASCII text and takes indent, and inputs
reduced to plain JSON data first so a template can only see dicts, lists and scalars. A GGUF without
a template (gemma-3-270m's has none) gets a built-in one chosen by architecture.

The prompt usually starts with the BOS text when the template writes `bos_token`; encode such a
prompt with add_special_tokens=False (or strip the BOS text) so the model does not see BOS twice."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from hearth.api.named_templates import NAMED, folded_turns
from hearth.errors import HearthError
from hearth.media.marker import MARKER
from hearth.tool_parsers import FORMATS, detect_format


RESERVED_VARS = frozenset({"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"})
"""Template variables a request's chat_template_kwargs may not set: the renderer's own."""


class ChatTemplateError(HearthError):
    """The chat template refused the conversation (raise_exception) or failed to render."""


# Gemma's turn format; a system message is folded into the first user turn.
GEMMA_TEMPLATE = "{{ bos_token }}\n" + folded_turns("sys ~ '\\n\\n'") + """
{{- '<start_of_turn>' ~ ('model' if message['role'] == 'assistant' else message['role']) ~ '\n' }}
{{- (ns.system if loop.first else '') ~ text(message['content']) | trim ~ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}
"""

# ChatML (<|im_start|>role ... <|im_end|>), llama.cpp's default when a model has no template.
CHATML_TEMPLATE = """
{%- for message in messages -%}
{{ '<|im_start|>' ~ message['role'] ~ '\n' }}
{%- if message['content'] is string -%}{{ message['content'] }}
{%- else -%}{% for part in message['content'] if part['type'] == 'text' %}{{ part['text'] }}{% endfor %}
{%- endif -%}
{{ '<|im_end|>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}
"""

BUILT_IN = {"chatml": CHATML_TEMPLATE, "gemma": GEMMA_TEMPLATE, **NAMED}
"""Templates a --chat-template may name (llama-server's names for them)."""

# general.architecture -> template used when the GGUF has none; anything else gets ChatML
FALLBACK_TEMPLATES = {"gemma": GEMMA_TEMPLATE, "gemma2": GEMMA_TEMPLATE, "gemma3": GEMMA_TEMPLATE,
                      "gemma3n": GEMMA_TEMPLATE}


def template_text(value: str) -> str:
    """A chat template given in place of the GGUF's (vLLM's --chat-template, llama-server's --chat-template
    and --chat-template-file): a built-in's name, a file holding a Jinja template, or the template itself."""
    if value in BUILT_IN:
        return BUILT_IN[value]
    path = Path(value).expanduser()
    if path.is_file():
        return path.read_text(encoding="utf-8")
    if "{{" in value or "{%" in value:
        return value
    raise ChatTemplateError(f"{value!r} is not a file, a Jinja template nor a built-in ({', '.join(BUILT_IN)})")


class ChatTemplate:
    def __init__(self, template: str | None, bos_token: str | None, eos_token: str | None, arch: str,
                 defaults: dict | None = None):
        """defaults: template variables every render gets unless it gives its own (--chat-template-kwargs)."""
        self.defaults = dict(defaults or {})
        self.is_fallback = not template
        self.source: str = template or FALLBACK_TEMPLATES.get(arch, CHATML_TEMPLATE)
        self.bos_token = bos_token or ""
        self.eos_token = eos_token or ""
        fmt = detect_format(self.source)
        # how the template's format wants history laid out, where it has a rule (harmony: one call a message)
        self._history = getattr(FORMATS[fmt], "history", None) if fmt else None
        self._typed: bool | None = None  # whether it reads content only as typed parts (typed_content)
        try:
            self._template = _ENV.from_string(self.source)
        except jinja2.TemplateSyntaxError as e:
            raise ChatTemplateError(
                f"the chat template does not parse: {e.message} (line {e.lineno})") from None

    def render(self, messages: list, tools: list | None = None, add_generation_prompt: bool = True,
               **kwargs: Any) -> str:
        """The prompt for `messages` (dicts, dataclasses or pydantic models with role/content)."""
        messages = _alias_reasoning(_plain(messages))
        if self.typed_content:
            messages = [_typed(m) for m in messages]
        if self._history is not None:
            messages = self._history(messages, self.source)
        context = _plain({**self.defaults, **kwargs, "messages": messages, "tools": tools,
                          "add_generation_prompt": add_generation_prompt})
        context.setdefault("bos_token", self.bos_token)
        context.setdefault("eos_token", self.eos_token)
        try:
            return self._template.render(**context)
        except ChatTemplateError:
            raise
        except jinja2.exceptions.SecurityError as e:
            raise ChatTemplateError(f"the chat template tried something unsafe: {e}") from None
        except (jinja2.TemplateError, TypeError, ValueError, KeyError, IndexError, AttributeError,
                ZeroDivisionError) as e:
            raise ChatTemplateError(f"the chat template failed: {type(e).__name__}: {e}") from None


    @property
    def typed_content(self) -> bool:
        """True where the template drops string content and reads a text part's text (SmolVLM's, Idefics3's:
        `for line in message['content']`): found once by rendering a needle both ways (llama.cpp's
        chat-template caps, `requires_typed_content`). Such a template gets every string as parts."""
        if self._typed is None:
            self._typed = not self._renders("string") and self._renders("typed")
        return self._typed

    def _renders(self, how: str) -> bool:
        needle = "<__hearth_needle__>"
        content = needle if how == "string" else [{"type": "text", "text": needle}]
        try:
            out = self._template.render(messages=[{"role": "user", "content": content}], tools=None,
                                        add_generation_prompt=True, bos_token=self.bos_token, eos_token=self.eos_token)
        except Exception:  # noqa: BLE001 - a template that refuses the probe: this way does not render
            return False
        return needle in out


def _typed(m: Any) -> Any:
    """A message whose string content is text parts, each image marker a part of its own (llama.cpp's
    server puts its media marker in a text part too): the template writes it where the image goes."""
    if not isinstance(m, dict) or not isinstance(m.get("content"), str):
        return m
    text, pieces, at = m["content"], [], 0
    for mark in MARKER.finditer(text):
        pieces += [text[at:mark.start()], mark.group(0)]
        at = mark.end()
    pieces = [p for p in pieces + [text[at:]] if p] or [""]
    return {**m, "content": [{"type": "text", "text": p} for p in pieces]}


def _raise_exception(message: str):
    raise ChatTemplateError(str(message))


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    # Jinja's own tojson HTML-escapes and has no ensure_ascii; templates expect json.dumps
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _Namespace(jinja2.utils.Namespace):
    """`namespace()` that refuses underscore names, the way into CPython internals."""

    def __init__(*args, **kwargs):  # noqa: N805 - Jinja's signature trick keeps namespace(self=...) usable
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        _check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)


def _check_name(name) -> None:
    if isinstance(name, str) and name.startswith("_"):
        raise jinja2.exceptions.SecurityError(f"namespace attribute {name!r} starts with an underscore")


class _DictFactory:
    """`dict(...)` and `dict.fromkeys(...)` for templates, without exposing the dict type itself."""

    def __call__(self, *args, **kwargs) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args) -> dict:
        return dict.fromkeys(*args)


class _GenerationBlock(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` marks assistant text for training masks; here it
    only renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller) -> str:
        return caller()


class _Sandbox(ImmutableSandboxedEnvironment):
    """Jinja's sandbox turns an unsafe attribute (`__class__`, `__globals__`, ...) into an undefined
    that only fails when used further; we refuse it at once, so no template can probe for them."""

    def unsafe_undefined(self, obj, attribute):
        raise jinja2.exceptions.SecurityError(
            f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe")


def _make_env() -> ImmutableSandboxedEnvironment:
    env = _Sandbox(trim_blocks=True, lstrip_blocks=True,
                   extensions=[_GenerationBlock, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now,
                       namespace=_Namespace, dict=_DictFactory())
    return env


_ENV = _make_env()
_REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")


def _alias_reasoning(messages: list) -> list:
    """Templates read reasoning as `reasoning_content` (Qwen3, DeepSeek) or `thinking` (gpt-oss)."""
    out = []
    for m in messages:
        if isinstance(m, dict):
            reasoning = next((m[k] for k in _REASONING_KEYS if m.get(k) is not None), None)
            if reasoning is not None:
                m = {"thinking": reasoning, **m, "reasoning_content": reasoning}
        out.append(m)
    return out


def _plain(value: Any) -> Any:
    """JSON-like data only: the sandbox cannot know which methods of arbitrary objects are harmful."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    for base in (bool, str, int, float):  # enums, str/int subclasses... back to the builtin type
        if isinstance(value, base):
            return base(value)
    if type(value).__module__ == "numpy" and callable(getattr(value, "item", None)):
        return _plain(value.item())  # numpy scalar
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if callable(getattr(value, "model_dump", None)):  # pydantic
        return _plain(value.model_dump())
    return f"<{type(value).__name__}>"
