"""LLM.get_tokenizer()'s object: vLLM's returns a Hugging Face tokenizer, and vLLM scripts call it as one
(`apply_chat_template(messages, tokenize=False, add_generation_prompt=True)`, `eos_token_id`, `len(tok)`); this
gives those over hearth's Tokenizer (read from the GGUF) and the LLM's chat template, the rest as hearth's."""

from __future__ import annotations

from hearth.llm_chat import ChatOptions, chat_prompt

HF_ONLY = ("return_tensors", "return_dict", "return_assistant_tokens_mask", "padding", "truncation", "max_length")
"""apply_chat_template's Hugging Face options that shape a tensor output: refused where set, not rendered as
template variables."""


class ChatTokenizer:
    def __init__(self, llm):
        self._llm = llm
        self._tok = llm.tokenizer

    def __getattr__(self, name: str):  # encode, decode, vocab_size, eos_token, ...: hearth's Tokenizer's
        return getattr(self._tok, name)

    def __len__(self) -> int:
        return self._tok.vocab_size

    @property
    def eos_token_id(self) -> int | None:
        return self._tok.eos_id

    @property
    def bos_token_id(self) -> int | None:
        return self._tok.bos_id

    def apply_chat_template(self, conversation: list[dict], tools: list[dict] | None = None, *, tokenize: bool = True,
                            add_generation_prompt: bool = False, continue_final_message: bool = False,
                            chat_template: str | None = None, **kwargs) -> str | list[int]:
        """Hugging Face's defaults (tokenize=True, add_generation_prompt=False); other keywords are template
        variables (enable_thinking=False), as there. The ids are LLM.chat's (BOS once)."""
        if given := [k for k in HF_ONLY if kwargs.get(k)]:
            raise ValueError(f"apply_chat_template: {', '.join(given)} is not supported here (it returns a str or "
                             "a list of ids)")
        kwargs = {k: v for k, v in kwargs.items() if k not in HF_ONLY}
        options = ChatOptions(add_generation_prompt, continue_final_message, chat_template, kwargs)
        text, ids = chat_prompt(self._llm, conversation, tools, options)
        return list(ids) if tokenize else text
