"""A chat template in place of the GGUF's, on `hearth serve`, `hearth run` and `hearth cluster serve`:
vLLM's --chat-template (a file or the template itself) and llama-server's --chat-template NAME (a
built-in) and --chat-template-file FILE -> EngineConfig.chat_template (its text); llama-server's
--chat-template-kwargs JSON -> EngineConfig.chat_template_kwargs. A bad one is one line naming the flag, before any
model loads."""

from __future__ import annotations

import argparse

from hearth.api.chat_template import BUILT_IN, ChatTemplate, ChatTemplateError, template_text
from hearth.commands.json_flag import json_flag
from hearth.errors import HearthError


def add_template_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--chat-template", default=None, metavar="TEMPLATE",
                   help="the chat template instead of the model's: a Jinja template, a file holding one, or a "
                        f"built-in ({', '.join(BUILT_IN)})")
    p.add_argument("--chat-template-file", default=None, metavar="FILE",
                   help="the chat template instead of the model's, from a file (llama-server's spelling)")
    p.add_argument("--chat-template-kwargs", default=None, metavar="JSON",
                   help="template variables for every chat, as a JSON object (llama-server's: e.g. "
                        "'{\"enable_thinking\": false}'); a request's own chat_template_kwargs win")


def chat_template(args: argparse.Namespace) -> str | None:
    """The template's text, parsed once here (None: the model's own)."""
    given = [(flag, v) for flag, v in (("--chat-template", getattr(args, "chat_template", None)),
                                       ("--chat-template-file", getattr(args, "chat_template_file", None))) if v]
    if len(given) > 1:
        raise HearthError("--chat-template and --chat-template-file both give the template: give one of them")
    if not given:
        return None
    flag, value = given[0]
    try:
        if flag == "--chat-template-file" and value not in BUILT_IN:
            with open(value, encoding="utf-8") as f:
                text = f.read()
        else:
            text = template_text(value)
        ChatTemplate(text, None, None, "")  # a template that does not parse fails here, not at the first request
    except OSError as e:  # was "--chat-template-file: [Errno 2] No such file or directory: 'x'"
        raise HearthError(f"{flag} {value}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise HearthError(f"{flag} {value}: not UTF-8 text") from None
    except ChatTemplateError as e:
        raise HearthError(f"{flag}: {e}") from None
    return text


def chat_template_kwargs(args: argparse.Namespace) -> dict:
    """--chat-template-kwargs as a dict ({} when not given); not a JSON object: one line naming the flag."""
    return json_flag("--chat-template-kwargs", getattr(args, "chat_template_kwargs", None), "template variables")
