"""A request's learned edits made in the copy it drafts (hearth.spec_decode.copy_edits): spans as
word edits, matched at word starts only, never re-made where made already, tokens before the first
match kept as they are, and kept to MAX_EDITS."""

from __future__ import annotations

import string

from hearth.spec_decode.copy_edits import MAX_EDITS, Edits, word_edit


class PieceCodec:
    """A tokenizer over a few text pieces: encode takes the longest piece that matches, left to right."""

    def __init__(self, pieces: list[str]):
        self.pieces = pieces

    def decode(self, ids):
        return "".join(self.pieces[i] for i in ids)

    def encode(self, text, add_special_tokens=True, parse_special=True):
        out = []
        while text:
            i = max((i for i, p in enumerate(self.pieces) if p and text.startswith(p)), key=lambda i: len(self.pieces[i]))
            out.append(i)
            text = text[len(self.pieces[i]):]
        return out


def test_spans_become_word_edits_a_plural_leaves_the_stem_and_a_short_one_the_whole_identifier():
    assert word_edit(" readings", " measurements")[:2] == ("reading", "measurement")
    assert word_edit("load_readings", "load_measurements")[:2] == ("reading", "measurement")  # "_" separates
    assert word_edit(" get_value", " set_value")[:2] == ("get_value", "set_value")  # never "get" -> "set"
    assert word_edit(" a", " b")[:2] == ("a", "b")
    assert word_edit(" data", " raw_data_v2")[:2] == ("data", "raw_data_v2")
    assert word_edit("    return", "    return await")[:2] == ("return", "return await")
    assert word_edit("(", "[") is None  # punctuation stays a token edit
    assert word_edit(" caf\ufffd", " bar") is None  # a character split across the span's tokens


def test_edits_are_made_at_word_and_part_starts_only_and_never_where_made_already():
    pieces = ["", " readings", " measurements", " a", " b", " return", " await", " data", " raw_data_v2"]
    codec = PieceCodec(pieces + list(string.ascii_letters + string.digits + string.punctuation + " "))
    edits = Edits()
    for old, new in [(" readings", " measurements"), (" a", " b"), (" return", " return await"), (" data", " raw_data_v2"),
                     (" get_value", " set_value")]:
        edits[tuple(codec.encode(old))] = tuple(codec.encode(new))
    text = "(readings) reading.sensor apple a load_readings return x return await x raw_data_v2 data get_config"
    got = codec.decode(edits.copy_of(codec.encode(text), 0, 200, codec))
    assert got == ("(measurements) measurement.sensor apple b load_measurements return await x return await x "
                   "raw_data_v2 raw_data_v2 get_config")
    plain = codec.decode(edits.copy_of(codec.encode(text), 0, 200, None))  # the control: token edits only
    assert "(readings)" in plain and "load_readings" in plain


def test_tokens_before_the_first_match_stay_and_a_text_without_one_is_not_tokenized_again():
    class Counting(PieceCodec):
        encodes = 0

        def encode(self, text, **kw):
            Counting.encodes += 1
            return super().encode(text, **kw)

    codec = Counting(["", " readings", " measurements", " x", "<special>", " y"])
    edits = Edits()
    edits[(1,)] = (2,)
    assert edits.copy_of([4, 3, 5, 3], 0, 4, codec) == [4, 3, 5, 3] and Counting.encodes == 0
    assert edits.copy_of([4, 3, 1, 5], 0, 4, codec) == [4, 3, 2, 5]  # <special> kept as its own token


def test_the_oldest_edit_goes_past_max_edits():
    edits = Edits()
    for i in range(MAX_EDITS + 2):
        edits[(i,)] = (100 + i,)
    edits[(2,)] = (102,)  # learned again: the newest
    assert len(edits) == MAX_EDITS and (0,) not in edits and (1,) not in edits and next(iter(edits)) == (3,)
