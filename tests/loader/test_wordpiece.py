"""The WordPiece (BERT) tokenizer from a GGUF vocabulary, against transformers' BertTokenizer built
from the same vocabulary in Hugging Face's spelling (what llama.cpp's WPM reproduces for uncased models)."""

from __future__ import annotations

import gguf
import pytest
from transformers import BertTokenizerFast

from hearth.loader.gguf_loader import GGUFFile
from hearth.loader.tokenizer import Tokenizer
from tests.bert_factory import hf_vocab, write_bert_tokenizer

TEXTS = [
    "Hello world",
    "The capital of France is Paris.",
    "Unbelievable!!! unable, believing; it's an embedding model",
    "  leading and   inner   spaces\tand\ttabs\nnewlines  ",
    "Café naïve résumé ÉCOLE über",  # precomposed accents: dropped
    "cafe\u0301 combining acute",  # a separate combining mark: dropped as well (HF; llama.cpp keeps it)
    "中文日本語 mixed with 한국 text",  # CJK ideographs are words each; Hangul is not CJK
    "unknownжword qqq xyzzy жж",  # no piece sequence covers a word with ж: [UNK] for the whole word
    "tokenizer2024 $42 50% a&b a+b=c user@host #tag a/b",
    "quotes \"here\" (parens) [brackets] {braces} <angle> a-b_c ~tilde^ `tick`",
    "control\x00chars\x07 and \ufffd replacement",
    "[CLS] written in the text, and [SEP] too",
    "",
]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    tokens = hf_vocab()
    path = tmp_path_factory.mktemp("wpm") / "wpm.gguf"
    w = gguf.GGUFWriter(str(path), "bert")
    write_bert_tokenizer(w, tokens)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    ref = BertTokenizerFast(vocab={t: i for i, t in enumerate(tokens)}, do_lower_case=True)
    return Tokenizer.from_gguf(GGUFFile(path)), ref


@pytest.mark.parametrize("text", TEXTS)
def test_ids_match_transformers(pair, text):
    tok, ref = pair
    assert tok.encode(text) == ref(text)["input_ids"]
    assert tok.encode(text, add_special_tokens=False) == ref(text, add_special_tokens=False)["input_ids"]


def test_cls_and_sep_wrap_the_text(pair):
    tok, _ = pair
    ids = tok.encode("hello world")
    assert (ids[0], ids[-1]) == (101, 102) and (tok.bos_id, tok.sep_id) == (101, 102)
    assert tok.id_to_piece(ids[1]) == "\u2581hello"


def test_continuations_and_unknowns(pair):
    tok, _ = pair
    pieces = [tok.id_to_piece(i) for i in tok.encode("unbelievable xyzжq", add_special_tokens=False)]
    assert pieces == ["\u2581un", "believ", "able", "[UNK]"]


def test_decode_joins_pieces_into_words(pair):
    tok, _ = pair
    assert tok.decode(tok.encode("hello world, unbelievable!"), skip_special_tokens=True) == \
        "hello world, unbelievable!"


def test_llama_cpp_defaults_without_special_ids(tmp_path):
    """An older file names no ids nor flags: [CLS] 101 first, [SEP] 102 last, [UNK] 100 (llama.cpp's WPM)."""
    path = tmp_path / "old.gguf"
    w = gguf.GGUFWriter(str(path), "bert")
    write_bert_tokenizer(w, hf_vocab(), name_specials=False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tok = Tokenizer.from_gguf(GGUFFile(path))
    assert tok.encode("hello qqжzz") == [101, tok.token_to_id("\u2581hello"), 100, 102]


def test_cls_and_sep_whatever_the_flags_say(tmp_path):
    """A converted BERT GGUF says add_bos, add_eos (eos [SEP]) and add_sep false (gguf-py's SpecialVocab
    reads "[CLS] $A [SEP] $B [SEP]" so): llama.cpp's WPM adds [CLS] and [SEP] once, whatever the flags."""
    path = tmp_path / "flags.gguf"
    w = gguf.GGUFWriter(str(path), "bert")
    write_bert_tokenizer(w, hf_vocab())
    w.add_add_sep_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tok = Tokenizer.from_gguf(GGUFFile(path))
    assert tok.encode("hello") == [101, tok.token_to_id("\u2581hello"), 102]
