"""llama-server's two editor stops for /infill (server_context's process_token), which llama.vscode and
llama.vim send with every request:

- n_indent: once the answer has a new line, each later line must be indented by at least n_indent
  spaces/tabs; the first one that is not (a non-blank character after less indentation) ends the
  answer, cut where that line's text starts (its newline and indentation stay, as llama-server's);
- t_max_predict_ms: past that many ms of generation, the next delta holding a new line ends it.

llama-server checks them per token, a line one token after its newline came (it advances its line
marker once per token); here per delta of the stream, which is one token but with speculative
decoding, where it may be several. Both end the answer as a limit (stop_type "limit"). A stream holds
back what a later n_indent cut could still take (`settled`): llama-server sends a token before its check,
so an editor joining its deltas got the blank line and indentation the whole reply leaves out."""

from __future__ import annotations


class EditorStops:
    def __init__(self, n_indent: int = 0, t_max_predict_ms: int = 0):
        self.n_indent, self.t_max_ms = n_indent, t_max_predict_ms
        self.text = ""
        self.has_new_line = False
        self.line = 0
        """Where the line to check starts (0: none yet), one newline at a time as llama-server's last_nl_pos."""

    @property
    def active(self) -> bool:
        return self.n_indent > 0 or self.t_max_ms > 0

    def settled(self) -> int:
        """How much of the text no later n_indent cut can take back: all of it up to the line still to
        be checked (the first one after the first newline, then each in turn), past it once that line
        is indented enough (a cut lands where a line's text starts, never before the line checked next)."""
        if self.n_indent <= 0 or not self.has_new_line:
            return len(self.text)
        start = self.line or self.text.find("\n") + 1
        pos = start
        while pos < len(self.text) and self.text[pos] in " \t":
            pos += 1
        if pos < len(self.text) and pos - start >= self.n_indent:  # it passed: the next line is the one to wait for
            nl = self.text.find("\n", start)
            return len(self.text) if nl < 0 else nl + 1
        return start

    def feed(self, delta: str, elapsed_ms: float) -> int | None:
        """The answer's text grew by `delta`, `elapsed_ms` into generation: the length of text to keep
        when it must end here, else None."""
        self.text += delta
        if self.has_new_line and self.n_indent > 0:
            if self.line > 0:
                pos = self.line
                while pos < len(self.text) and self.text[pos] in " \t":
                    pos += 1
                if pos < len(self.text) and pos - self.line < self.n_indent:
                    return pos
            nl = self.text.find("\n", self.line)
            if nl >= 0:
                self.line = nl + 1
        if "\n" in delta:
            self.has_new_line = True
            if 0 < self.t_max_ms < elapsed_ms:
                return len(self.text)
        return None
