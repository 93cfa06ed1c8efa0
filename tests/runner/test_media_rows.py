"""MediaRows: which batch rows an image's embeddings go to, each image encoded once per digest while a
request reads it, the unused ones kept only up to a bound."""

import pytest
import torch

from hearth.media.inputs import MediaInput
from hearth.runner import media_rows
from hearth.runner.media_rows import MediaRows
from hearth.runner.messages import ScheduledSequence
from hearth.sampling_params import SamplingParams


class Counting:
    def __init__(self, hidden=4):
        self.hidden, self.calls = hidden, []

    def encode(self, pixels):
        self.calls.append(pixels)
        return torch.arange(pixels * 100, pixels * 100 + 3 * self.hidden, dtype=torch.float32).view(3, self.hidden)


def seq(rid, start, n, media):
    return ScheduledSequence(rid, [0] * n, start, [], False, SamplingParams(), [], media=media)


def image(offset, pixels, bidirectional=False):
    return MediaInput(offset, 3, bytes([pixels]), pixels, bidirectional)


def test_rows_land_at_their_batch_rows_across_chunks_and_encode_once():
    enc = Counting()
    rows = MediaRows(enc, 4)
    a = image(2, 1)  # positions 2..4
    # chunk 1 of "a": positions 0..3 (rows 0..1 of the image at batch rows 2..3); "b" first, 5 rows
    at, values = rows.rows([seq("b", 0, 5, [image(0, 2)]), seq("a", 0, 4, [a])], [0, 5, 9])
    assert at.tolist() == [0, 1, 2, 7, 8]
    assert torch.equal(values, torch.cat([enc.encode(2), enc.encode(1)[:2]]))
    enc.calls.clear()
    at, values = rows.rows([seq("a", 4, 3, [a])], [0, 3])  # chunk 2: position 4, the image's last row
    assert enc.calls == []  # encoded in chunk 1
    assert at.tolist() == [0] and torch.equal(values, enc.encode(1)[2:])
    assert rows.rows([seq("a", 7, 1, [])], [0, 1]) is None


def test_unused_images_are_dropped_past_the_bound(monkeypatch):
    monkeypatch.setattr(media_rows, "MAX_UNUSED", 2)
    enc = Counting()
    rows = MediaRows(enc, 4)
    for i in range(5):
        rows.rows([seq(str(i), 0, 3, [image(0, i)])], [0, 3])
    assert len(rows.encoded) == 5  # every request still lives
    for i in range(4):
        rows.forget(str(i))
    assert list(rows.encoded) == [bytes([2]), bytes([3]), bytes([4])]  # "4" lives, 2 and 3 the newest unused
    rows.forget("4")
    assert list(rows.encoded) == [bytes([3]), bytes([4])]
    calls = len(enc.calls)
    rows.rows([seq("again", 0, 3, [image(0, 4)])], [0, 3])
    assert len(enc.calls) == calls  # kept: not encoded again


def test_an_encoder_giving_the_wrong_shape_and_a_cut_bidirectional_span_are_errors():
    rows = MediaRows(Counting(hidden=5), 4)
    with pytest.raises(ValueError, match=r"rows \(3, 5\) for an image of 3 rows; the model takes rows 4 wide"):
        rows.rows([seq("a", 0, 3, [image(0, 1)])], [0, 3])
    with pytest.raises(RuntimeError, match="cut by the chunk"):
        MediaRows.bidirectional([seq("a", 0, 2, [image(1, 1, bidirectional=True)])])
    assert MediaRows.bidirectional([seq("a", 0, 4, [image(1, 1, True), image(0, 2)])]) == {0: [(1, 4)]}


def test_encode_names_the_requests_whose_images_fail_and_encodes_the_others():
    class Failing(Counting):
        def encode(self, pixels):
            if pixels == 9:
                raise RuntimeError("bad pixels")
            return super().encode(pixels)[: 2 if pixels == 8 else 3]  # 8: a row too few

    rows = MediaRows(Failing(), 4)
    seqs = [seq("ok", 0, 5, [image(0, 1)]), seq("raises", 0, 5, [image(0, 2), image(3, 9)]),
            seq("short", 0, 5, [image(1, 8)]), seq("later", 0, 2, [image(3, 9)])]  # its image not in this chunk
    failed = rows.encode(seqs)
    assert sorted(failed) == ["raises", "short"]
    assert failed["raises"] == ("the image at prompt positions 3..5 could not be encoded: RuntimeError: bad pixels")
    assert "be encoded: ValueError: the vision encoder made rows (2, 4) for an image of 3 rows" in failed["short"]
    at, values = rows.rows([seqs[0]], [0, 5])  # the others' rows: encoded already
    assert at.tolist() == [0, 1, 2] and rows.vision.calls == [1, 2, 8]  # "later": not this chunk
