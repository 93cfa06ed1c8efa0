"""A request's conversation read before its model loads, so a bad message (an empty list, a bad role or content
part, a tool result without its call, an image the model does not take or one too many) is a 400 with nothing
loaded and nothing unloaded (hearth.api.model_pool), as hearth.api.sampling.check_before_load does for the sampler
fields. The route's own reading (hearth.api.messages.openai_messages, anthropic_messages, ollama_messages,
responses_items.input_messages) runs against what the pool knows of the model (hearth.api.model_spec.Known: its
vision projector and --limit-mm-per-prompt), then again against the model as loaded: that one is the ground
truth."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from hearth.api.media_parts import RequestImages

T = TypeVar("T")


@dataclass(slots=True)
class Reading(Generic[T]):
    read: Callable[[RequestImages], T]
    """The route's reading of its body: what it gives (the template's messages), its image parts added to the
    RequestImages it is handed."""
    new_images: Callable[[Any], RequestImages]
    """A Vision (None: text only) -> the request's RequestImages (a follow-up's continue its stored ones)."""
    vision: Any
    """The Vision it was read against (Known.vision)."""
    value: T
    images: RequestImages

    def on(self, served) -> tuple[T, RequestImages]:
        """What `read` gives for `served`, the model as loaded, and its images (load them next): the reading
        before the load where that was against this model's own Vision (it was loaded then), else read again."""
        if served.vision is self.vision:
            return self.value, self.images
        images = self.new_images(served.vision)
        return self.read(images), images


def read_before_load(pool, model: str | None, read: Callable[[RequestImages], T],
                     new_images: Callable[[Any], RequestImages] = RequestImages) -> Reading[T]:
    """`read` run now against the model `model` names, loaded or not (ModelPool.known: an unknown model's 404)."""
    vision = pool.known(model).vision
    images = new_images(vision)
    return Reading(read, new_images, vision, read(images), images)
