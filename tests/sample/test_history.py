"""What a row's history carries (hearth.sample.history): only as far back as a penalty window, DRY or a bad
word reads, and all of it where vLLM's rule reads the whole context."""

from __future__ import annotations

from hearth.sample.history import context_needed, tail
from hearth.sampling_params import SamplingParams

PROMPT, OUTPUT = [1, 2, 3, 4], [5, 6]


def test_context_needed_is_the_widest_window():
    assert context_needed(SamplingParams()) == 0
    assert context_needed(SamplingParams(presence_penalty=0.5)) is None  # vLLM's rule: everything
    assert context_needed(SamplingParams(presence_penalty=0.5, repeat_last_n=3)) == 3
    assert context_needed(SamplingParams(presence_penalty=0.5, repeat_last_n=0)) == 0  # penalties off
    assert context_needed(SamplingParams(repetition_penalty=1.1, repeat_last_n=-1)) is None
    assert context_needed(SamplingParams(dry_multiplier=0.8)) == 64  # llama.cpp's default DRY window
    assert context_needed(SamplingParams(dry_multiplier=0.8, dry_penalty_last_n=-1)) is None
    assert context_needed(SamplingParams(dry_multiplier=0.8, dry_penalty_last_n=5, presence_penalty=1,
                                         repeat_last_n=3)) == 5
    assert context_needed(SamplingParams(repeat_last_n=8)) == 0  # a window without a penalty reads nothing


def test_tail_keeps_the_last_tokens_of_the_context():
    assert tail(PROMPT, OUTPUT, None) == (PROMPT, OUTPUT)
    assert tail(PROMPT, OUTPUT, 0) == ([], [])
    assert tail(PROMPT, OUTPUT, 1) == ([], [6])
    assert tail(PROMPT, OUTPUT, 3) == ([4], [5, 6])
    assert tail(PROMPT, OUTPUT, 99) == (PROMPT, OUTPUT)
    assert tail(PROMPT, OUTPUT, 0, output_need=1) == ([], [6])  # a bad word's tail of the output
