"""Errors a user can cause. Each carries one line that names what was wrong; the CLI prints it
without a traceback and the API turns it into a 400-class body."""


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


class PromptTooLongError(HearthError):
    """A prompt (plus requested tokens) that does not fit the model's context; never truncated."""

    def __init__(self, prompt_tokens: int, max_context: int):
        super().__init__(
            f"prompt is {prompt_tokens} tokens but the context holds {max_context}; "
            "shorten the prompt or raise --max-model-len"
        )
        self.prompt_tokens = prompt_tokens
        self.max_context = max_context
