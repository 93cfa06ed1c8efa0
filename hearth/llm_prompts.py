"""What the LLM's calls take as a prompt (vLLM's PromptType: a string, a TextPrompt or a TokensPrompt, with an
optional 'media' list), read into (text, token ids), and a rendered chat's text into its ids. Bad input is a
TypeError naming where it sat in the call."""

from __future__ import annotations

import operator
from typing import TypedDict


class TextPrompt(TypedDict, total=False):
    """vLLM's TextPrompt (vllm.inputs): {'prompt': text}."""

    prompt: str


class TokensPrompt(TypedDict, total=False):
    """vLLM's TokensPrompt (vllm.inputs): {'prompt_token_ids': ids}, used as they are."""

    prompt_token_ids: list[int]
    prompt: str


PromptType = str | dict
PROMPT_TYPES = "a str, {'prompt': str} or {'prompt_token_ids': [int, ...]}"
"""What one prompt may be (vLLM's PromptType: a string, a TextPrompt or a TokensPrompt)."""


def prompt_ids(tokenizer, prompt: PromptType, name: str) -> tuple[str | None, list[int]]:
    """name: where the prompt sits in the call (prompts[2]), for the error."""
    if isinstance(prompt, dict) and "prompt_token_ids" in prompt:
        return prompt.get("prompt"), token_ids(prompt["prompt_token_ids"], f"{name}['prompt_token_ids']")
    text = prompt.get("prompt") if isinstance(prompt, dict) else prompt
    if isinstance(text, str):
        return text, tokenizer.encode(text)
    raise TypeError(f"{name} must be {PROMPT_TYPES}, not {type_name(prompt)}")


def truncated(encoded: tuple[str | None, list[int]], keep: int | None, max_model_len: int,
              media: bool) -> tuple[str | None, list[int]]:
    """(text, ids) with only the last `keep` ids (vLLM's truncate_prompt_tokens; -1: max_model_len of them);
    the text stays the one given, as vLLM's RequestOutput.prompt. A prompt with images is not cut."""
    text, ids = encoded
    keep = max_model_len if keep == -1 else keep
    if keep is None or len(ids) <= keep:
        return encoded
    if media:
        raise ValueError("truncate_prompt_tokens: a prompt with images is not cut (an image's rows would split)")
    return text, list(ids[-keep:])


def chat_ids(tokenizer, text: str) -> list[int]:
    """A rendered chat prompt's ids."""
    tok = tokenizer
    # BOS exactly once, as llama.cpp does: whether or not the template wrote it
    if tok.add_bos and tok.bos_token and text.startswith(tok.bos_token):
        text = text[len(tok.bos_token):]
    return tok.encode(text, add_special_tokens=True, parse_special=True)


def prompt_media(prompt: PromptType) -> tuple:
    """A prompt dict's image spans ('media'), else ()."""
    return tuple(prompt.get("media") or ()) if isinstance(prompt, dict) else ()


def prompt_list(prompts) -> list:
    """generate's prompts as a list: one prompt, or a list (any iterable) of them."""
    if isinstance(prompts, (str, dict)):
        return [prompts]
    if not isinstance(prompts, (bytes, bytearray)):
        try:
            return list(prompts)
        except TypeError:
            pass
    raise TypeError(f"prompts must be one prompt ({PROMPT_TYPES}) or a list of them, not {type_name(prompts)}")


def one_each(value, count: int, what: str, items: str = "prompts") -> list:
    """A keyword given for all or as a list with one per prompt (vLLM's sampling_params, lora_request): a list
    of `count`; a list of another length is a ValueError (`2 sampling params for 3 prompts`)."""
    values = value if isinstance(value, list) else [value] * count
    if len(values) != count:
        raise ValueError(f"{len(values)} {what} for {count} {items}")
    return values


def token_ids(ids, name: str) -> list[int]:
    if isinstance(ids, (str, bytes, dict)) or not hasattr(ids, "__iter__"):
        raise TypeError(f"{name} must be a list of int token ids, not {type(ids).__name__}")
    out = []
    for k, t in enumerate(ids):
        try:  # index(): ints (numpy's too), never a float cut short nor a digit string
            out.append(operator.index(t))
        except TypeError:
            raise TypeError(f"{name}[{k}] must be an int token id, not {type(t).__name__}") from None
    return out


def type_name(value) -> str:
    if not isinstance(value, dict):
        return type(value).__name__
    if "prompt" in value:
        return f"{{'prompt': {type(value['prompt']).__name__}}}"
    return f"a dict without 'prompt' or 'prompt_token_ids' (keys: {', '.join(map(str, value)) or 'none'})"
