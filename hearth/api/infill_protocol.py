"""The body of POST /infill: llama-server's /infill fields (tools/server/README.md) on top of the
/completion options it shares (hearth.api.llama_protocol)."""

from __future__ import annotations

from pydantic import StrictStr

from hearth.api.infill import CHUNK_NAME
from hearth.api.llama_protocol import LlamaOptions
from hearth.api.openai_protocol import _Body


class ExtraChunk(_Body):
    """One input_extra entry: another file's text, given as repo-level context."""
    text: StrictStr
    filename: StrictStr = CHUNK_NAME


class InfillRequest(LlamaOptions):
    input_prefix: StrictStr
    input_suffix: StrictStr
    input_extra: list[ExtraChunk] = []
    prompt: StrictStr = ""
    """Text after the prefix (llama-server puts it there, before FIM_SUF): what the user typed so far."""
