"""Errors a user can cause. Each carries one line that names what was wrong; the CLI prints it
without a traceback and the API turns it into a 400-class body."""

import dataclasses
import numbers


class HearthError(Exception):
    """Base for every error that is the user's input, not a bug."""


class ModelNotFoundError(HearthError):
    """A model name that is neither a catalog entry, a local file nor a hub reference."""


class ModelLoadError(HearthError):
    """A GGUF that is missing, truncated, corrupt, or uses something hearth does not support."""


class UnsupportedError(ModelLoadError):
    """An architecture or tensor type hearth has no implementation for."""


class PlanError(HearthError):
    """A plan request that cannot be answered: unknown device, impossible numbers, bad description."""


class DownloadError(HearthError):
    """A pull that failed: network, checksum mismatch, missing package file."""


def can_raise_context(max_context: int, model_context: int | None) -> bool:
    """The one rule every "raise --max-model-len / --ctx" hint follows: a context is never run past the
    model's own (hearth.loader.context.context_to_run clamps it there), so raising it helps only
    below that. model_context None: not known where the error is made."""
    return model_context is None or max_context < model_context


class PromptTooLongError(HearthError):
    """A prompt (plus requested tokens) that does not fit the model's context; never truncated."""

    def __init__(self, prompt_tokens: int, max_context: int, model_context: int | None = None):
        """model_context: the model's own context (None: not known here). A context that is already
        the model's cannot be raised: the message then names only what the user can do."""
        self.can_raise = can_raise_context(max_context, model_context)
        remedy = "shorten the prompt or raise --max-model-len" if self.can_raise else "shorten the prompt"
        if model_context is not None and self.can_raise:
            remedy += f" (the model's own context is {model_context})"
        super().__init__(f"{too_long(prompt_tokens, max_context)}; {remedy}")
        self.prompt_tokens = prompt_tokens
        self.max_context = max_context


def too_long(prompt_tokens: int, max_context: int) -> str:
    """Why a prompt does not fit: past the context, or filling it (the answer needs one token more)."""
    if prompt_tokens == max_context:
        return (f"prompt is {prompt_tokens} tokens, which fills the context ({max_context}) and leaves no room "
                "for an answer (the prompt must be shorter than the context)")
    return f"prompt is {prompt_tokens} tokens but the context holds {max_context}"


class MaxTokensTooLargeError(PromptTooLongError):
    """A prompt that fits but leaves less room than the max tokens asked for (`field`: the
    request's name for them): an error, as OpenAI and vLLM answer it, never an answer cut at the
    context's end. can_raise: as PromptTooLongError's (the message itself, OpenAI's, names no flag)."""

    def __init__(self, prompt_tokens: int, max_tokens: int, max_context: int, field: str = "max_tokens",
                 model_context: int | None = None):
        self.can_raise = can_raise_context(max_context, model_context)
        HearthError.__init__(
            self, f"{field}: this model's maximum context length is {max_context} tokens, but "
            f"{prompt_tokens + max_tokens} were requested ({prompt_tokens} in the prompt, {max_tokens} in "
            f"{field}); {field} can be at most {max_context - prompt_tokens} for this prompt"
        )
        self.prompt_tokens, self.max_tokens, self.max_context, self.field = prompt_tokens, max_tokens, max_context, field


def check_room(prompt_tokens: int, max_tokens: int | None, max_context: int, field: str = "max_tokens",
               model_context: int | None = None) -> None:
    """Raise MaxTokensTooLargeError when a prompt that fits leaves fewer than max_tokens for the
    answer (None: the room left caps it, and the answer ends with finish_reason "length")."""
    if max_tokens is not None and prompt_tokens < max_context and prompt_tokens + max_tokens > max_context:
        raise MaxTokensTooLargeError(prompt_tokens, max_tokens, max_context, field, model_context)


_NUMBERS = {"int": (numbers.Integral,), "int | None": (numbers.Integral, type(None)),
            "float": (numbers.Real,), "float | None": (numbers.Real, type(None))}
"""A dataclass field's annotation -> the types its value may have (numpy's numbers are numbers too)."""


def wrong_number_field(obj) -> tuple[str, str] | None:
    """(field, why) for the first number field of the dataclass `obj` that holds something else
    (LLM(max_model_len="4k"), SamplingParams(top_p="x")), else None: the range checks then raised
    TypeError "'>=' not supported between instances of 'str' and 'int'", naming no field."""
    for f in dataclasses.fields(obj):
        kinds, value = _NUMBERS.get(f.type), getattr(obj, f.name)
        if kinds is not None and not isinstance(value, kinds):
            return f.name, f"must be {'an integer' if f.type.startswith('int') else 'a number'}, got {value!r}"
    return None
