"""The fill-in-the-middle prompt (hearth.api.infill) against llama-server's format_prompt_infill: exact
token ids on a tiny GGUF whose vocabulary holds Qwen2.5-Coder's six FIM tokens (ids 312..317, found by
their text as in Qwen's files), the repo-level pattern, the snippet fallback, BOS placement, and the
fitting rule: nothing dropped while it fits; past it the extra context's oldest tokens, then prefix
and suffix 3:1; the markers and the prompt field never."""

from __future__ import annotations

import pytest

from hearth.api.infill import (DoesNotFit, Dropped, Extra, FIMTokens, NoFIMTokens, extra_context, fim_tokens,
                               fit, layout)
from hearth.loader.gguf_loader import GGUFFile
from hearth.loader.tokenizer import Tokenizer
from tests.gguf_factory import write_tiny_gguf

PRE, MID, SUF, PAD, REP, SEP = 312, 313, 314, 315, 316, 317
"""The tiny vocabulary's FIM ids (320 tokens: gguf_factory.FIM_TOKENS at 312..317, BOS 318, EOS 319)."""


@pytest.fixture(scope="module")
def tok(tmp_path_factory) -> Tokenizer:
    path = tmp_path_factory.mktemp("fim") / "tiny-fim.gguf"
    write_tiny_gguf(path, "qwen2", fim=True)
    return Tokenizer.from_gguf(GGUFFile(str(path)))


def plain(tok):
    return lambda text: tok.encode(text, add_special_tokens=False, parse_special=False)


def test_fim_ids_found_by_their_text(tok):
    assert fim_tokens(tok) == FIMTokens(PRE, SUF, MID, REP, SEP, None)  # gpt2 vocab: no BOS added
    assert {PAD, REP, SEP} <= tok.eog_ids  # llama.cpp ends generation at them (vocab.py)


def test_a_model_without_them_is_refused_in_llama_servers_words(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, "qwen2")
    with pytest.raises(NoFIMTokens) as e:
        fim_tokens(Tokenizer.from_gguf(GGUFFile(str(path))))
    assert str(e.value) == ("Infill is not supported by this model: prefix token is missing. "
                            "suffix token is missing. middle token is missing. ")
    with pytest.raises(NoFIMTokens):
        fim_tokens(object())  # a tokenizer that knows no special slots


def test_repo_level_layout_exact_ids(tok):
    enc = plain(tok)
    fim = fim_tokens(tok)
    extra = extra_context(fim, enc, [("a.py", "x = 1\n"), ("b.py", "y = 2\n")]).ids
    ids = layout(fim, enc("def f(x):\n"), enc("    return y\n"), enc("  "), extra)
    assert ids == [REP, *enc("myproject\n"), SEP, *enc("a.py\n"), *enc("x = 1\n"), SEP, *enc("b.py\n"),
                   *enc("y = 2\n"), SEP, *enc("filename\n"), PRE, *enc("def f(x):\n"), *enc("  "), SUF,
                   *enc("    return y\n"), MID]
    assert tok.decode(ids) == ("<|repo_name|>myproject\n<|file_sep|>a.py\nx = 1\n<|file_sep|>b.py\ny = 2\n"
                               "<|file_sep|>filename\n<|fim_prefix|>def f(x):\n  <|fim_suffix|>    return y\n"
                               "<|fim_middle|>")
    # without input_extra the header and the current file's separator stay, as llama.cpp writes them
    assert layout(fim, [1], [2], extra=extra_context(fim, enc, []).ids) == [
        REP, *enc("myproject\n"), SEP, *enc("filename\n"), PRE, 1, SUF, 2, MID]


def test_code_is_plain_text(tok):
    """A file that spells a control token keeps it as characters: it must not end the prompt's file."""
    enc = plain(tok)
    ids = enc("s = '<|fim_pad|><|file_sep|>'")
    assert not {PAD, SEP} & set(ids) and tok.decode(ids) == "s = '<|fim_pad|><|file_sep|>'"


def test_snippet_fallback_and_bos():
    """No FIM_REP/FIM_SEP: each chunk under llama.cpp's snippet line; BOS after the extra context."""
    fim = FIMTokens(pre=10, suf=11, mid=12, rep=None, sep=None, bos=1)
    words = {"\n\n--- snippet ---\n\n": [7, 7], "a.py\n": [99], "text": [5, 6]}
    extra = extra_context(fim, words.__getitem__, [("a.py", "text")])
    assert extra == Extra(chunks=(7, 7, 5, 6))
    assert layout(fim, [20], [30], [40], extra.ids) == [7, 7, 5, 6, 1, 10, 20, 40, 11, 30, 12]


FIM = FIMTokens(pre=-1, suf=-2, mid=-3, rep=None, sep=None, bos=None)


def test_nothing_dropped_while_it_fits():
    prefix, suffix, extra = list(range(100, 140)), list(range(200, 240)), list(range(300, 320))
    whole = layout(FIM, prefix, suffix, [9], extra)
    assert fit(FIM, prefix, suffix, [9], Extra(chunks=tuple(extra)), len(whole)) == (whole, Dropped())
    assert not Dropped()


def test_extra_context_goes_first_from_its_start():
    prefix, suffix, extra = list(range(100, 140)), list(range(200, 240)), list(range(300, 320))
    ids, dropped = fit(FIM, prefix, suffix, [9], Extra(chunks=tuple(extra)), 3 + 1 + 80 + 5)
    assert dropped == Dropped(input_extra=15) and dropped.as_dict()["input_extra"] == 15
    assert ids == layout(FIM, prefix, suffix, [9], extra[15:])


def test_then_prefix_and_suffix_three_to_one():
    prefix, suffix = list(range(100, 140)), list(range(200, 240))
    ids, dropped = fit(FIM, prefix, suffix, [9, 9], Extra(chunks=(300, 301)), 3 + 2 + 20)
    assert dropped == Dropped(input_extra=2, input_prefix=25, input_suffix=35)
    assert ids == [-1, *prefix[25:], 9, 9, -2, *suffix[:5], -3]  # the prefix's end, the suffix's start
    # a short prefix leaves its share to the suffix
    ids, dropped = fit(FIM, [100, 101, 102], suffix, [], Extra(), 3 + 20)
    assert dropped == Dropped(input_suffix=23) and ids == [-1, 100, 101, 102, -2, *suffix[:17], -3]


def test_markers_and_prompt_are_never_dropped():
    with pytest.raises(DoesNotFit) as e:
        fit(FIM, [1], [2], list(range(10)), Extra(), 12)
    assert (e.value.needed, e.value.room) == (13, 12)
    bos = FIMTokens(pre=-1, suf=-2, mid=-3, rep=None, sep=None, bos=0)
    assert fit(bos, [1], [2], [5], Extra(), 5) == ([0, -1, 5, -2, -3], Dropped(input_prefix=1, input_suffix=1))


def test_the_repo_header_is_kept_and_not_counted():
    """Only the client's chunks are dropped and counted; the header and the current file's separator
    stay as markers (an oversized prefix without input_extra dropped and counted the header)."""
    extra = Extra(head=(50, 51, 52), chunks=(60, 61, 62, 63), tail=(70, 71))
    prefix, suffix = list(range(100, 140)), list(range(200, 210))
    ids, dropped = fit(FIM, prefix, suffix, [], extra, 3 + 2 + 3 + 20)
    assert dropped == Dropped(input_extra=4, input_prefix=25, input_suffix=5)
    assert ids == [50, 51, 52, 70, 71, -1, *prefix[25:], -2, *suffix[:5], -3]
    ids, dropped = fit(FIM, prefix, suffix, [], extra, 3 + 2 + 3 + 50 + 2)
    assert dropped == Dropped(input_extra=2) and ids[:7] == [50, 51, 52, 62, 63, 70, 71]
    with pytest.raises(DoesNotFit) as e:
        fit(FIM, [], [], [9], extra, 8)
    assert e.value.needed == 9
