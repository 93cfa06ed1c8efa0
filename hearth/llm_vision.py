"""LLM's images: the --mmproj file read before the weights load (a wrong one fails first), its vision
encoder attached to the runner, and LLM.chat's image parts made into prompt ids with their rows
(the server's own per-request markers and prompt layout: hearth.api.media_parts, media_prompt)."""

from __future__ import annotations

import logging
from pathlib import Path

from hearth.errors import HearthError
from hearth.llm_prompts import chat_ids
from hearth.media.config import VisionConfig, check_lm_hidden, read_vision_config
from hearth.media.vision_stats import VisionStats

log = logging.getLogger("hearth")


def vision_config(mmproj: str, arch_embeds_only: bool) -> VisionConfig | None:
    """The mmproj's settings (None without one), before any weights load."""
    if not mmproj:
        return None
    if arch_embeds_only:
        raise HearthError("--mmproj: an embedding model takes no images")
    if not Path(mmproj).expanduser().is_file():
        raise HearthError(f"--mmproj {mmproj}: no such file")
    return read_vision_config(Path(mmproj).expanduser())


def attach(llm, cfg: VisionConfig | None, backend) -> None:
    """The encoder on the runner, once the LM is up: rows as wide as its hidden size. The tower runs on
    the CPU (its own tensors are CPU tensors) whatever device runs the LM. llm.vision_stats counts its work
    (/metrics; None without an mmproj)."""
    if cfg is None:
        return
    llm.vision_stats = VisionStats()
    from hearth.backends import select as select_backend  # torch's side: only with an mmproj
    from hearth.models.vision import VisionEncoder

    check_lm_hidden(cfg, llm.model_config.hidden_size, where=f"the model {llm.config.model!r}",
                    deepstack=llm.model_config.deepstack_layers)
    cpu = backend if backend.name in ("cpu", "torch") else select_backend("cpu")
    llm.runner.set_vision(llm.vision_stats.timed(VisionEncoder.load(Path(llm.config.mmproj).expanduser(), cpu, cfg)))
    log.debug("%s %s", llm.config.model, reads_images(cfg, llm.config.mmproj))  # serve prints it as its other lines


def reads_images(cfg: VisionConfig, mmproj: str) -> str:
    """The startup line's words: `reads images (mmproj FILE: gemma3 projector, 256 tokens an image)`."""
    each = EACH.get(cfg.spec.resize, "tokens an image")
    return f"reads images (mmproj {mmproj}: {cfg.projector} projector, {cfg.num_embeds} {each})"


EACH = {"split": "tokens a tile", "smart": "tokens an image at most"}
"""Projector.resize -> what VisionConfig.num_embeds counts (Qwen-VL's smart resize: its most, by max_pixels)."""


class ChatImages:
    """LLM.chat's images (OpenAI's `image_url` parts, Anthropic's `image`): `images` takes the messages'
    image parts (hearth.api.messages.openai_messages puts their markers in the text), encode() makes the
    rendered prompt ids with each image's rows. It holds what encode_with_images reads of a served model."""

    def __init__(self, llm):
        from hearth.api.media_fetch import USER_GIVEN  # here: hearth.api loads fastapi
        from hearth.api.media_parts import RequestImages, Vision

        # the caller's own messages: their URLs may name this machine (the server's requests may not)
        self.vision = Vision(llm.vision_config, fetch_policy=USER_GIVEN) if llm.vision_config is not None else None
        self.tokenizer, self.name = llm.tokenizer, llm.config.model
        self.encode_chat_text = lambda text: chat_ids(llm.tokenizer, text)
        self.images = RequestImages(self.vision)

    def encode(self, text: str, messages: list[dict]) -> list[int]:
        from hearth.api.media_prompt import encode_with_images

        for part in self.images.parts:
            self.images.load_now(part)
        return encode_with_images(self, text, self.images, messages)


def tokens_prompt(ids: list[int]) -> dict:
    """A tokens prompt for LLM.generate / stream; with images (a PromptIds) the spans of their rows too."""
    media = getattr(ids, "media", ())
    return {"prompt_token_ids": list(ids), "media": list(media)} if media else {"prompt_token_ids": ids}
