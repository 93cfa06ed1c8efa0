"""Incremental detokenization: UTF-8 safe streaming and stop strings with hold-back.

Tokens are turned into bytes and fed to an incremental UTF-8 decoder, so a multi-byte character
split across tokens is emitted only when complete. Text that could still be the start of a stop
string is held back until it can no longer match."""

from __future__ import annotations

import codecs

from hearth.sampling_params import SamplingParams


class IncrementalDetokenizer:
    def __init__(self, tokenizer, params: SamplingParams):
        self.tokenizer = tokenizer
        self.params = params
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.text = ""
        self._hold = max((len(s) for s in params.stop), default=1) - 1
        self._emitted = 0

    def add(self, token_id: int, final: bool = False, check_stop: bool = True, stop_token: bool = False) -> str | None:
        """Append one token; returns the stop string if one now appears (text is cut before it).
        check_stop=False (before min_tokens, as vLLM) only appends. stop_token: the token of stop_token_ids
        that ended the request, whose text is left out unless include_stop_str_in_output (vLLM's rule: it
        stays in the token ids)."""
        if stop_token and not self.params.include_stop_str_in_output:
            piece = b""
        else:
            piece = self.tokenizer.token_to_bytes(token_id, skip_special_tokens=self.params.skip_special_tokens)
        start = max(0, len(self.text) - self._hold)
        self.text += self._decoder.decode(piece, final=final)
        if not check_stop:
            return None
        for stop in self.params.stop:
            at = self.text.find(stop, start)
            if at >= 0:
                end = at + len(stop) if self.params.include_stop_str_in_output else at
                self.text = self.text[:end]
                return stop
        return None

    def flush(self) -> None:
        self.text += self._decoder.decode(b"", final=True)

    def new_text(self, finished: bool) -> str:
        """Text not yet emitted; while running, keep back what could begin a stop string."""
        limit = len(self.text) if finished or not self.params.stop else max(len(self.text) - self._hold, self._emitted)
        delta = self.text[self._emitted : limit]
        self._emitted = limit
        return delta
