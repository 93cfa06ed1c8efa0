"""A byte-level vocabulary for grammar tests: every byte, plus pieces that let one token straddle
a trigger (`.<` + `tool` + `_call` + `>\\n{"`), and an end-of-generation token."""

from __future__ import annotations

PIECES = ["<tool_call>", "</tool_call>", ".<", "tool", "_call", ">\n", '>\n{"', '{"', '":', ' "', '",', "name",
          "arguments", "get_weather", "city", "Paris", '"}', "}\n", "Sure", " let", " me", "<think>", "</think>",
          "```json\n", "\n```"]


class TinyTokenizer:
    def __init__(self):
        self.pieces = [bytes([i]) for i in range(256)] + [p.encode() for p in PIECES] + [b"<eos>"]
        self.vocab_size = len(self.pieces)
        self.eos_id = self.vocab_size - 1
        self.eog_ids = {self.eos_id}
        self.bos_id = None

    def token_to_bytes(self, i: int) -> bytes:
        return self.pieces[i]

    def is_control(self, i: int) -> bool:
        return i == self.eos_id

    def encode(self, text: str, add_special_tokens: bool = False, parse_special: bool = False) -> list[int]:
        """Greedy longest match, so multi-byte pieces win."""
        data, out, i = text.encode(), [], 0
        while i < len(data):
            best = max((j for j in range(256, self.eos_id) if data.startswith(self.pieces[j], i)),
                       key=lambda j: len(self.pieces[j]), default=data[i])
            out.append(best)
            i += len(self.pieces[best])
        return out

    def id(self, piece: str) -> int:
        return 256 + PIECES.index(piece)

    def decode(self, ids: list[int]) -> str:
        return b"".join(self.pieces[i] for i in ids).decode("utf-8", "replace")
